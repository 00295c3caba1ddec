'use strict'
// A kafkajs consumer that joins `group` with Kafka's "roundrobin" protocol (see lib.js), so it
// can share the group with other clients. Streams JSON lines: {"event": "joined", assignment}
// on every join and {"event": "message", ...} per record; leaves when stdin closes.
//
// options: bootstrap, topic, group, timeoutMs

const { main, kafka, emit, KafkaRoundRobin } = require('./lib')

main(async ({ topic, group }) => {
  const consumer = kafka('kcoord-js-mixed').consumer({
    groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 500,
    maxWaitTimeInMs: 200, partitionAssigners: [KafkaRoundRobin],
  })
  consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
    emit({ event: 'joined', memberId: payload.memberId, protocol: payload.groupProtocol,
      assignment: (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b) })
  })
  const stdinClosed = new Promise(resolve => {
    process.stdin.on('end', resolve)
    process.stdin.on('close', resolve)
    process.stdin.resume()
  })
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  let read = 0
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      read++
      emit({ event: 'message', partition, offset: Number(message.offset), value: message.value.toString() })
    },
  })
  await stdinClosed
  await consumer.disconnect()
  return { read }
})

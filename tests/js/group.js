'use strict'
// Two kafkajs consumers in one group split a topic's partitions; a kafkajs producer then
// writes `count` messages; together the consumers read each exactly once and commit.
//
// options: bootstrap, topic, group, partitions, count, timeoutMs
// result: { consumers: [{ memberId, assignment (when split), messages: [[partition, offset, value]] }],
//           committed }

const { main, kafka, waitFor, emit } = require('./lib')

main(async ({ topic, group, partitions, count }) => {
  const client = kafka('kcoord-js-group')
  const consumers = [0, 1].map(() =>
    client.consumer({ groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000, heartbeatInterval: 500,
      maxWaitTimeInMs: 200 }))
  const seen = consumers.map(() => ({ memberId: null, assignment: [], messages: [] }))
  consumers.forEach((consumer, i) => {
    consumer.on(consumer.events.GROUP_JOIN, ({ payload }) => {
      seen[i].memberId = payload.memberId
      seen[i].assignment = (payload.memberAssignment[topic] || []).slice().sort((a, b) => a - b)
      emit({ event: 'joined', consumer: i, assignment: seen[i].assignment })
    })
  })
  for (const [i, consumer] of consumers.entries()) {
    await consumer.connect()
    await consumer.subscribe({ topics: [topic], fromBeginning: true })
    await consumer.run({
      eachMessage: async ({ partition, message }) => {
        seen[i].messages.push([partition, Number(message.offset), message.value.toString()])
      },
    })
  }
  const split = () => {
    const all = seen.flatMap(s => s.assignment).sort((a, b) => a - b)
    return seen.every(s => s.assignment.length > 0) &&
      JSON.stringify(all) === JSON.stringify([...Array(partitions).keys()])
  }
  await waitFor(split, 20000, 'the two consumers to split the partitions')
  // What each owns now; leaving at the end rebalances the group again.
  const owned = seen.map(s => s.assignment)

  const producer = client.producer()
  await producer.connect()
  const messages = [...Array(count).keys()].map(n => ({ partition: n % partitions, value: `m-${n}` }))
  await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()

  const total = () => seen.reduce((sum, s) => sum + s.messages.length, 0)
  await waitFor(() => total() >= count, 20000, `${count} messages`)

  // Each partition's last offset + 1 committed by the group, as a later reader will see it.
  const admin = client.admin()
  await admin.connect()
  const ends = Object.fromEntries((await admin.fetchTopicOffsets(topic)).map(p => [p.partition, p.high]))
  let committed = []
  const fullyCommitted = () => committed.length === partitions &&
    committed.every(p => p.offset === ends[p.partition])
  const deadline = Date.now() + 10000
  while (!fullyCommitted() && Date.now() < deadline) {
    const [fetched] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    committed = fetched.partitions.map(({ partition, offset }) => ({ partition, offset }))
    if (!fullyCommitted()) await new Promise(resolve => setTimeout(resolve, 100))
  }
  await admin.disconnect()
  for (const consumer of consumers) await consumer.disconnect()
  const result = seen.map((s, i) => ({ memberId: s.memberId, assignment: owned[i], messages: s.messages }))
  return { consumers: result, committed: committed.sort((a, b) => a.partition - b.partition) }
})

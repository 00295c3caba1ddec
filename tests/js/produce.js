'use strict'
// A kafkajs producer writes values `${prefix}-${n}` for n in [start, start + count), round
// robin over the topic's partitions, acks=-1.
//
// options: bootstrap, topic, partitions, start, count, prefix, timeoutMs
// result: { produced: [[partition, baseOffset]] }

const { main, kafka } = require('./lib')

main(async ({ topic, partitions, start = 0, count, prefix = 'm' }) => {
  const producer = kafka('kcoord-js-producer').producer()
  await producer.connect()
  const messages = []
  for (let n = start; n < start + count; n++) messages.push({ partition: n % partitions, value: `${prefix}-${n}` })
  const acks = await producer.send({ topic, acks: -1, messages })
  await producer.disconnect()
  return { produced: acks.map(a => [a.partition, Number(a.baseOffset)]) }
})

'use strict'
// One kafkajs consumer in `group` reads until it has `want` messages, waits until the group's
// committed offsets reach what it read, then leaves.
//
// options: bootstrap, topic, group, want, timeoutMs
// result: { messages: [[partition, offset, value]], committed: [{ partition, offset }] }

const { main, kafka, waitFor } = require('./lib')

main(async ({ topic, group, want }) => {
  const client = kafka('kcoord-js-consumer')
  const consumer = client.consumer({ groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000,
    heartbeatInterval: 500, maxWaitTimeInMs: 200 })
  const messages = []
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    eachMessage: async ({ partition, message }) => {
      messages.push([partition, Number(message.offset), message.value.toString()])
    },
  })
  await waitFor(() => messages.length >= want, 20000, `${want} messages`)

  const next = {}
  for (const [partition, offset] of messages) next[partition] = Math.max(next[partition] || 0, offset + 1)
  const admin = client.admin()
  await admin.connect()
  let committed = []
  const done = () => Object.entries(next).every(([p, offset]) =>
    committed.some(c => c.partition === Number(p) && Number(c.offset) === offset))
  const deadline = Date.now() + 10000
  while (!done() && Date.now() < deadline) {
    const [fetched] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    committed = fetched.partitions.map(({ partition, offset }) => ({ partition, offset: Number(offset) }))
    if (!done()) await new Promise(resolve => setTimeout(resolve, 100))
  }
  await admin.disconnect()
  await consumer.disconnect()
  return { messages, committed: committed.sort((a, b) => a.partition - b.partition) }
})

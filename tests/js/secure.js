'use strict'
// Over whatever ssl/sasl settings it is given: produce `count` messages, consume them in
// `group`, commit, and read the committed offset back.
//
// options: bootstrap, topic, group, count, ssl?, sasl?, timeoutMs
// result: { produced, consumed: [values], committed }

const { main, kafka, waitFor } = require('./lib')

main(async ({ topic, group, count }) => {
  const client = kafka('kcoord-js-secure')
  const producer = client.producer()
  await producer.connect()
  const values = Array.from({ length: count }, (_, i) => `secure-${i}`)
  await producer.send({ topic, messages: values.map(value => ({ value, partition: 0 })) })
  await producer.disconnect()

  const consumer = client.consumer({ groupId: group, sessionTimeout: 10000, rebalanceTimeout: 10000,
    heartbeatInterval: 500, maxWaitTimeInMs: 200 })
  const consumed = []
  let last = -1
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning: true })
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ message }) => {
      consumed.push(message.value.toString())
      last = Number(message.offset)
    },
  })
  await waitFor(() => consumed.length >= count, 20000, `${count} messages`)
  await consumer.commitOffsets([{ topic, partition: 0, offset: String(last + 1) }])
  const admin = client.admin()
  await admin.connect()
  const [fetched] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
  await admin.disconnect()
  await consumer.disconnect()
  return { produced: values.length, consumed, committed: Number(fetched.partitions[0].offset) }
})

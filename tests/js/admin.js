'use strict'
// kafkajs admin against a group that has committed offsets and no running members:
// listGroups, describeGroups, fetchOffsets, setOffsets, resetOffsets, deleteGroups; then
// topic administration: createTopics, createPartitions, fetchTopicMetadata, deleteTopics.
//
// options: bootstrap, topic, group, timeoutMs
// result: one entry per step, in order

const { main, kafka } = require('./lib')

main(async ({ topic, group }) => {
  const admin = kafka('kcoord-js-admin').admin()
  await admin.connect()
  const offsets = async () => {
    const [fetched] = await admin.fetchOffsets({ groupId: group, topics: [topic] })
    return fetched.partitions.map(({ partition, offset }) => [partition, offset]).sort((a, b) => a[0] - b[0])
  }
  const steps = {}
  steps.listed = (await admin.listGroups()).groups
  steps.described = (await admin.describeGroups([group, 'no-such-group'])).groups
    .map(({ groupId, state, protocolType, members }) => ({ groupId, state, protocolType, members: members.length }))
  steps.fetched = await offsets()
  await admin.setOffsets({ groupId: group, topic, partitions: [{ partition: 0, offset: '1' }] })
  steps.afterSet = await offsets()
  await admin.resetOffsets({ groupId: group, topic, earliest: true })
  steps.afterReset = await offsets()
  steps.deleted = await admin.deleteGroups([group])
  steps.listedAfterDelete = (await admin.listGroups()).groups.map(g => g.groupId)
  try {
    await admin.deleteGroups(['no-such-group'])
    steps.deleteUnknown = 'no error'
  } catch (e) {
    steps.deleteUnknown = { name: e.name, groups: (e.groups || []).map(g => [g.groupId, g.errorCode]) }
  }
  steps.created = await admin.createTopics({ topics: [{ topic: 'js-created', numPartitions: 2 }] })
  await admin.createPartitions({ topicPartitions: [{ topic: 'js-created', count: 3 }] })
  const { topics } = await admin.fetchTopicMetadata({ topics: ['js-created'] })
  steps.createdPartitions = topics[0].partitions.map(p => p.partitionId).sort((a, b) => a - b)
  await admin.deleteTopics({ topics: ['js-created'] })
  steps.topicsAfterDelete = (await admin.listTopics()).sort()
  await admin.disconnect()
  return steps
})

'use strict'
// Shared by the kafkajs scenario scripts the integration suite runs against kcoord.
//
// A script gets its options as one JSON argument, writes JSON lines to stdout (events as
// they happen, then one {"result": ...} line) and logs to stderr. Every script is bounded:
// past options.timeoutMs it prints {"error": ...} and exits 3.

// The scripts name partitions explicitly; kafkajs's notice about its v2 default partitioner is noise.
process.env.KAFKAJS_NO_PARTITIONER_WARNING = '1'

const { Kafka, logLevel, AssignerProtocol } = require('kafkajs')

const options = JSON.parse(process.argv[2] || '{}')

function emit(line) {
  process.stdout.write(JSON.stringify(line) + '\n')
}

// kafkajs's default logger writes to stdout, which carries our JSON: log to stderr instead.
const toStderr = () => ({ namespace, level, log }) => {
  const { message, ...extra } = log
  process.stderr.write(`[${logLevel[level] || level}] ${namespace}: ${message} ${JSON.stringify(extra)}\n`)
}

function kafka(clientId) {
  return new Kafka({
    clientId: clientId || 'kcoord-js',
    brokers: [options.bootstrap],
    logLevel: logLevel.WARN,
    logCreator: toStderr,
    connectionTimeout: 3000,
    requestTimeout: 10000,
    retry: { retries: 8, initialRetryTime: 100, maxRetryTime: 1000 },
    // Security settings pass straight through (kafkajs's own names): { ca, cert, key } and
    // { mechanism, username, password }.
    ...(options.ssl ? { ssl: options.ssl } : {}),
    ...(options.sasl ? { sasl: options.sasl } : {}),
  })
}

// Resolve once condition() holds; reject after timeoutMs.
function waitFor(condition, timeoutMs, what) {
  return new Promise((resolve, reject) => {
    const deadline = Date.now() + timeoutMs
    const check = () => {
      if (condition()) return resolve()
      if (Date.now() > deadline) return reject(new Error(`timed out after ${timeoutMs} ms waiting for ${what}`))
      setTimeout(check, 25)
    }
    check()
  })
}

// Run the scenario: print its result (or the error) as the last line and exit.
function main(scenario) {
  const timeoutMs = options.timeoutMs || 30000
  const timer = setTimeout(() => {
    emit({ error: `scenario timed out after ${timeoutMs} ms` })
    process.exit(3)
  }, timeoutMs)
  scenario(options).then(
    result => {
      clearTimeout(timer)
      emit({ result })
      process.exit(0)
    },
    err => {
      clearTimeout(timer)
      emit({ error: String((err && err.stack) || err), name: err && err.name })
      process.exit(2)
    }
  )
}

// A round-robin assigner under Kafka's own protocol name "roundrobin", so kafkajs members
// can share a group with Java, librdkafka and kafka-python members using theirs. The
// subscription and assignment blobs are Kafka's consumer protocol v0, which kafkajs's
// MemberMetadata / MemberAssignment already are.
const KafkaRoundRobin = ({ cluster }) => ({
  name: 'roundrobin',
  version: 0,
  async assign({ members, topics }) {
    const memberIds = members.map(m => m.memberId).sort()
    const byMember = Object.fromEntries(memberIds.map(id => [id, {}]))
    let next = 0
    for (const topic of [...topics].sort()) {
      const partitions = cluster.findTopicPartitionMetadata(topic).map(p => p.partitionId).sort((a, b) => a - b)
      for (const partition of partitions) {
        const owner = byMember[memberIds[next++ % memberIds.length]]
        ;(owner[topic] = owner[topic] || []).push(partition)
      }
    }
    return memberIds.map(memberId => ({
      memberId,
      memberAssignment: AssignerProtocol.MemberAssignment.encode({
        version: 0,
        assignment: byMember[memberId],
        userData: Buffer.alloc(0),
      }),
    }))
  },
  protocol({ topics }) {
    return {
      name: 'roundrobin',
      metadata: AssignerProtocol.MemberMetadata.encode({ version: 0, topics, userData: Buffer.alloc(0) }),
    }
  },
})

module.exports = { options, emit, kafka, waitFor, main, KafkaRoundRobin }

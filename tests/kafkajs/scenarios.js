// KafkaJS scenarios against a running weir broker, driven by tests/test_kafkajs.py.
//
//   node scenarios.js SCENARIO BOOTSTRAP 'JSON-ARGS'
//
// Each scenario does what a KafkaJS user would do and prints one JSON object (what it saw) as
// the last line of stdout; the pytest file asserts on it. KafkaJS's own log goes to stderr
// (level WARN, or KAFKAJS_LOG=info|debug), so a failing test shows it. Any error exits 1.
'use strict'

const { Kafka, logLevel, CompressionTypes } = require('kafkajs')

const [scenario, bootstrap, rawArgs] = process.argv.slice(2)
const args = JSON.parse(rawArgs || '{}')

const levels = { nothing: logLevel.NOTHING, error: logLevel.ERROR, warn: logLevel.WARN, info: logLevel.INFO, debug: logLevel.DEBUG }
const kafka = new Kafka({
  clientId: 'weir-kafkajs-test',
  brokers: [bootstrap],
  logLevel: levels[process.env.KAFKAJS_LOG || 'warn'],
  logCreator: () => ({ namespace, level, label, log }) => {
    const { message, ...extra } = log
    process.stderr.write(`kafkajs ${label} [${namespace}] ${message} ${JSON.stringify(extra)}\n`)
  },
})

// Consumers in tests: short long-polls and heartbeats, so that disconnects and rebalances
// take a fraction of a second rather than KafkaJS's defaults (5 s fetch wait, 3 s heartbeat).
const consumerOptions = groupId => ({ groupId, maxWaitTimeInMs: 200, heartbeatInterval: 300, sessionTimeout: 10000, rebalanceTimeout: 10000 })

const sleep = ms => new Promise(resolve => setTimeout(resolve, ms))

async function until(what, check, timeoutMs = 20000) {
  const deadline = Date.now() + timeoutMs
  while (!check()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`)
    await sleep(20)
  }
}

const headersOf = headers => Object.fromEntries(Object.entries(headers || {}).map(([k, v]) => [k, String(v)]))
const record = (partition, m) => ({
  partition,
  offset: Number(m.offset),
  key: m.key === null ? null : m.key.toString(),
  value: m.value === null ? null : m.value.toString(),
  headers: headersOf(m.headers),
  timestamp: Number(m.timestamp),
})

// Consumes `count` records of `topic` in group `groupId` (autoCommit), then disconnects
// (which commits). Returns them in arrival order, and any past `count` that arrived first.
async function consumeN({ topic, groupId, count, fromBeginning = true }) {
  const consumer = kafka.consumer(consumerOptions(groupId))
  await consumer.connect()
  await consumer.subscribe({ topics: [topic], fromBeginning })
  const got = []
  await consumer.run({ eachMessage: async ({ partition, message }) => { got.push(record(partition, message)) } })
  await until(`${count} records (have ${got.length})`, () => got.length >= count)
  await sleep(300) // a few more fetches: anything extra would show up
  await consumer.disconnect()
  return got
}

const scenarios = {
  // createTopics, listTopics, fetchTopicMetadata, describeConfigs, alterConfigs, deleteTopics.
  async admin({ topic, partitions }) {
    const admin = kafka.admin()
    await admin.connect()
    const out = {}
    out.created = await admin.createTopics({
      topics: [{ topic, numPartitions: partitions, configEntries: [{ name: 'retention.ms', value: '3600000' }] }],
      waitForLeaders: true,
    })
    out.createdAgain = await admin.createTopics({ topics: [{ topic, numPartitions: partitions }] })
    out.listed = (await admin.listTopics()).includes(topic)
    out.metadata = (await admin.fetchTopicMetadata({ topics: [topic] })).topics
    out.brokers = (await admin.describeCluster()).brokers
    const describe = async () => (await admin.describeConfigs({
      resources: [{ type: 2, name: topic, configNames: ['retention.ms', 'cleanup.policy'] }],
      includeSynonyms: false,
    })).resources
    out.configsBefore = await describe()
    await admin.alterConfigs({
      validateOnly: false,
      resources: [{ type: 2, name: topic, configEntries: [{ name: 'retention.ms', value: '7200000' }, { name: 'cleanup.policy', value: 'compact' }] }],
    })
    out.configsAfter = await describe()
    await admin.deleteTopics({ topics: [topic], timeout: 10000 })
    out.listedAfterDelete = (await admin.listTopics()).includes(topic)
    await admin.disconnect()
    return out
  },

  async admin_create({ topic, partitions }) {
    const admin = kafka.admin()
    await admin.connect()
    const created = await admin.createTopics({ topics: [{ topic, numPartitions: partitions }], waitForLeaders: true })
    await admin.disconnect()
    return { created }
  },

  // One producer sends `batches` (each a send() of [{partition, key, value, headers}]).
  async produce({ topic, acks, compression = 'none', idempotent = false, batches }) {
    const producer = kafka.producer(idempotent ? { idempotent: true, maxInFlightRequests: 1 } : {})
    await producer.connect()
    const codec = { none: CompressionTypes.None, gzip: CompressionTypes.GZIP }[compression]
    const results = []
    for (const messages of batches) {
      results.push(await producer.send({ topic, acks, compression: codec, messages }))
    }
    await producer.disconnect()
    return { results }
  },

  async consume(a) {
    return { records: await consumeN(a) }
  },

  // Two consumers in one group: they split the partitions; the second leaves and the first
  // takes them all. Records produced in each phase are consumed once, by the owner.
  async rebalance({ topic, groupId, partitions }) {
    const producer = kafka.producer()
    await producer.connect()
    const members = ['c1', 'c2'].map(name => ({ name, consumer: kafka.consumer(consumerOptions(groupId)), joins: [], got: [] }))
    const start = async m => {
      m.consumer.on(m.consumer.events.GROUP_JOIN, e => m.joins.push({ memberId: e.payload.memberId, assignment: e.payload.memberAssignment[topic] || [] }))
      await m.consumer.connect()
      await m.consumer.subscribe({ topics: [topic], fromBeginning: true })
      await m.consumer.run({ eachMessage: async ({ partition, message }) => { m.got.push(record(partition, message)) } })
    }
    const last = m => (m.joins.length ? m.joins[m.joins.length - 1].assignment : [])
    const produceAll = async tag => {
      const messages = []
      for (let p = 0; p < partitions; p++) messages.push({ partition: p, key: `${tag}-${p}`, value: `${tag} to ${p}` })
      await producer.send({ topic, acks: -1, messages })
    }
    const [c1, c2] = members
    await start(c1)
    await until('c1 to own every partition', () => last(c1).length === partitions)
    await start(c2)
    const t0 = Date.now()
    await until('c1 and c2 to split the partitions', () => last(c2).length > 0 && last(c1).length + last(c2).length === partitions)
    const split = { c1: [...last(c1)].sort(), c2: [...last(c2)].sort(), ms: Date.now() - t0 }
    await produceAll('split')
    await until('the split records', () => c1.got.length + c2.got.length === partitions)
    const c1Joins = c1.joins.length
    const t1 = Date.now()
    await c2.consumer.disconnect()
    await until('c1 to rejoin after c2 left', () => c1.joins.length > c1Joins && last(c1).length === partitions)
    const afterLeave = { c1: [...last(c1)].sort(), ms: Date.now() - t1 }
    await produceAll('after')
    await until('the records after the leave', () => c1.got.filter(r => r.key.startsWith('after')).length === partitions)
    await sleep(300)
    await c1.consumer.disconnect()
    await producer.disconnect()
    return {
      split,
      afterLeave,
      memberIds: [c1.joins[0].memberId, c2.joins[0].memberId],
      c1: c1.got,
      c2: c2.got,
    }
  },

  // A transactional producer: commit, abort, commit (the second sending its group's offsets
  // with the transaction, sendOffsets); then what a read_committed consumer (KafkaJS's
  // default) and a read_uncommitted one see.
  async transaction({ topic, groupId }) {
    const producer = kafka.producer({ transactionalId: `tx-${topic}`, idempotent: true, maxInFlightRequests: 1 })
    let error = null
    try {
      await producer.connect()
      for (const [value, end] of [['committed-1', 'commit'], ['aborted', 'abort'], ['committed-2', 'commit']]) {
        const tx = await producer.transaction()
        await tx.send({ topic, messages: [{ value }] })
        if (value === 'committed-2') {
          await tx.sendOffsets({ consumerGroupId: groupId, topics: [{ topic, partitions: [{ partition: 0, offset: '2' }] }] })
        }
        await tx[end]()
      }
    } catch (e) {
      error = { name: e.name, message: e.message, retriable: e.retriable }
    }
    await producer.disconnect()
    const seen = async readUncommitted => {
      const consumer = kafka.consumer({ ...consumerOptions(`${groupId}-${readUncommitted}`), readUncommitted })
      await consumer.connect()
      await consumer.subscribe({ topics: [topic], fromBeginning: true })
      const got = []
      await consumer.run({ eachMessage: async ({ partition, message }) => { got.push(record(partition, message)) } })
      await until('records', () => got.length >= (readUncommitted ? 3 : 2))
      await sleep(1000) // anything more would show up
      await consumer.disconnect()
      return got.map(r => r.value)
    }
    const admin = kafka.admin()
    await admin.connect()
    const committed = (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
      .map(p => Number(p.offset))
    await admin.disconnect()
    return { error, committed: error ? null : committed, readCommitted: error ? null : await seen(false), readUncommitted: error ? null : await seen(true) }
  },

  // admin.fetchOffsets / resetOffsets / setOffsets / describeGroups / listGroups of a group
  // with no running member (KafkaJS's setOffsets refuses a running group).
  async groupAdmin({ topic, groupId, setTo }) {
    const admin = kafka.admin()
    await admin.connect()
    const out = {}
    const fetch = async () => (await admin.fetchOffsets({ groupId, topics: [topic] }))[0].partitions
      .map(p => ({ partition: p.partition, offset: Number(p.offset) }))
      .sort((a, b) => a.partition - b.partition)
    out.committed = await fetch()
    out.described = (await admin.describeGroups([groupId])).groups
    out.listed = (await admin.listGroups()).groups
    // Each setOffsets/resetOffsets takes KafkaJS about 5 s: its helper consumer joins the
    // group, pauses, and waits one fetch interval (maxWaitTimeInMs, 5 s by default) before it
    // commits. So: two of them, not more.
    await admin.resetOffsets({ groupId, topic, earliest: true })
    out.afterResetEarliest = await fetch()
    await admin.setOffsets({ groupId, topic, partitions: setTo.map(({ partition, offset }) => ({ partition, offset: String(offset) })) })
    out.afterSet = await fetch()
    out.topicOffsets = (await admin.fetchTopicOffsets(topic))
      .map(p => ({ partition: p.partition, low: Number(p.low), high: Number(p.high) }))
      .sort((a, b) => a.partition - b.partition)
    await admin.disconnect()
    return out
  },
}

;(async () => {
  const run = scenarios[scenario]
  if (!run) throw new Error(`unknown scenario ${scenario}`)
  const out = await run(args)
  process.stdout.write(JSON.stringify(out) + '\n')
})().catch(e => {
  process.stderr.write(`scenario ${scenario} failed: ${e && e.stack ? e.stack : e}\n`)
  if (e && e.cause) process.stderr.write(`cause: ${e.cause.stack || e.cause}\n`)
  process.exit(1)
})

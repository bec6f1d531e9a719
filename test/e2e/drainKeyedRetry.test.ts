/**
 * Keyed retries of sends and submits during a graceful stop, against a real server process and
 * SIGTERM (docs/operations.md, "Stopping"; docs/api.md, Idempotency): a retry whose key holds an
 * answer gets that answer from the session's journal, byte for byte, and a retry of a keyed turn
 * still running gets 409 `ambiguous` `in_flight`, never the refusal of new work; a key the server
 * does not hold is refused 503 `overloaded`, its session's journal left as it was and no turn
 * started. A slow tool's turn on another session holds the drain open meanwhile.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as net from "node:net"
import * as path from "node:path"
import { afterEach, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, eventually, request, type ServerProcess, sleep, startServer } from "../support/server.js"

/** Milliseconds the slow tool takes: the drain stays open while the retries are answered. */
const TOOL_MS = 8_000
/** What the server logs when it stops admitting work. */
const STOPPING = "admitting no new work"

beforeAll(ensureBuilt, 120_000)

let server: ServerProcess | undefined
afterEach(async () => {
  await server?.dispose()
  server = undefined
})

type Answer = { status: number; text: string; body: any; headers?: Headers | undefined; error?: string | undefined }

/** An answer, or how its connection failed. */
const settle = (p: Promise<{ status: number; text: string; body: any; headers: Headers }>): Promise<Answer> =>
  p.then((r) => ({ ...r, error: undefined }), (e: unknown) => ({ status: 0, text: "", body: undefined, error: String((e as Error)?.cause ?? e) }))

/** Every byte of a session's journal, as one digest. */
const journalDigest = (dataDir: string, session: string) => {
  const dir = path.join(dataDir, "sessions", session, "journal")
  const hash = crypto.createHash("sha256")
  for (const name of fs.readdirSync(dir).sort()) hash.update(name).update(fs.readFileSync(path.join(dir, name)))
  return hash.digest("hex")
}

const send = (s: ServerProcess, session: string, message: string, key: string, async = false) =>
  settle(request(s.baseUrl, `/v1/sessions/${session}/messages`, {
    json: { input: { message } },
    headers: { "idempotency-key": key, ...(async ? { prefer: "respond-async" } : {}) }
  }))

const create = async (s: ServerProcess, body: unknown) => {
  const r = await request(s.baseUrl, "/v1/sessions", { json: body })
  expect(r.status, r.text).toBe(201)
  return r.body.session_id as string
}

/** A session whose one turn runs the slow tool, and one that answers two turns. */
const sessionsOf = async (s: ServerProcess) => {
  const slow = await create(s, {
    model: { provider: "scripted", replies: [{ tool_calls: [{ name: "slow", input: { ms: TOOL_MS } }] }, { text: "slow done" }] },
    tools: [{ name: "slow" }]
  })
  const answered = await create(s, { model: { provider: "scripted", replies: [{ text: "first" }, { text: "second" }, { text: "third" }] } })
  return { slow, answered }
}

/** Answers a keyed send and a keyed submit on `session`, and waits for the submit's turn to end. */
const answerBoth = async (s: ServerProcess, session: string) => {
  const sent = await send(s, session, "one", "answered-send")
  expect(sent.status, sent.text).toBe(200)
  const submitted = await send(s, session, "two", "answered-submit", true)
  expect(submitted.status, submitted.text).toBe(202)
  await eventually("the submitted turn to end", async () => {
    const r = await request(s.baseUrl, `/v1/sessions/${session}`)
    return r.body.status === "idle" ? true : undefined
  })
  return { sent, submitted }
}

/** A raw keyed send that declares its whole body and sends only its first half, until `finish`. */
const partialSend = async (s: ServerProcess, session: string, key: string, body: string) => {
  const { hostname, port } = new URL(s.baseUrl)
  const socket = net.connect(Number(port), hostname)
  await new Promise<void>((resolve, reject) => socket.once("connect", resolve).once("error", reject))
  socket.on("error", () => undefined)
  let answer = ""
  socket.on("data", (b) => (answer += b.toString("utf8")))
  const closed = new Promise<void>((resolve) => socket.once("close", () => resolve()))
  const bytes = Buffer.from(body)
  const half = bytes.length >> 1
  socket.write(
    `POST /v1/sessions/${session}/messages HTTP/1.1\r\nhost: ${hostname}\r\ncontent-type: application/json\r\nidempotency-key: ${key}\r\ncontent-length: ${bytes.length}\r\n\r\n`
  )
  socket.write(bytes.subarray(0, half))
  return { finish: () => void socket.write(bytes.subarray(half)), answer: () => answer, closed }
}

/**
 * Starts the slow turn (keyed), signals SIGTERM once its tool runs, and answers the retries and
 * new keys sent while the drain waits for it; then the slow turn's answer and the exit.
 */
const drainWithRetries = async (s: ServerProcess, slow: string, answered: string) => {
  const running = send(s, slow, "run the slow tool", "running-send")
  await eventually("the slow tool to start", async () => (s.toolCalls().length > 0 ? true : undefined))
  const journalBefore = journalDigest(s.dataDir, answered)
  const eventsBefore = (await request(s.baseUrl, `/v1/sessions/${answered}/events?after=0`)).text

  // A keyed retry whose body is still arriving when the stop begins: it is taken, not cut.
  const arriving = await partialSend(s, answered, "answered-send", JSON.stringify({ input: { message: "one" } }))
  await sleep(300)

  s.signal("SIGTERM")
  await eventually("the server to stop admitting work", async () => (s.lines.some((l) => l.includes(STOPPING)) ? true : undefined))
  arriving.finish()
  const retriedSend = await send(s, answered, "one", "answered-send")
  const retriedSubmit = await send(s, answered, "two", "answered-submit", true)
  const retriedRunning = await send(s, slow, "run the slow tool", "running-send")
  const newSend = await send(s, answered, "three", "new-send")
  const newSubmit = await send(s, answered, "three", "new-submit", true)
  const newOnRunning = await send(s, slow, "another", "new-on-running")
  const ran = await running
  return { journalBefore, eventsBefore, arriving, retriedSend, retriedSubmit, retriedRunning, newSend, newSubmit, newOnRunning, ran }
}

const expectRefusedAsNewWork = (what: string, answer: Answer, output: string) => {
  expect(answer.error, `${what}: ${output}`).toBeUndefined()
  expect(answer.status, `${what}: ${answer.text}`).toBe(503)
  expect(answer.body, what).toMatchObject({ code: "overloaded", retryable: true, message: "the server is stopping and admits no new work" })
}

/** What every drain in these tests must show, the keys' first answers given. */
const expectDrain = async (
  s: ServerProcess,
  first: { sent: Answer; submitted: Answer },
  d: Awaited<ReturnType<typeof drainWithRetries>>,
  answered: string
) => {
  expect(d.retriedSend.error, s.output).toBeUndefined()
  expect(d.retriedSend.status, d.retriedSend.text).toBe(200)
  expect(d.retriedSend.text, "the send's stored answer, byte for byte").toBe(first.sent.text)
  expect(d.retriedSubmit.error, s.output).toBeUndefined()
  expect(d.retriedSubmit.status, d.retriedSubmit.text).toBe(202)
  expect(d.retriedSubmit.text, "the submit's receipt, byte for byte").toBe(first.submitted.text)
  expect(d.retriedSubmit.headers?.get("preference-applied")).toBe("respond-async")

  expect(d.retriedRunning.error, s.output).toBeUndefined()
  expect(d.retriedRunning.status, d.retriedRunning.text).toBe(409)
  expect(d.retriedRunning.body).toMatchObject({ code: "ambiguous", retryable: true, details: { ambiguous: true, in_flight: true } })

  expectRefusedAsNewWork("a new keyed send", d.newSend, s.output)
  expectRefusedAsNewWork("a new keyed submit", d.newSubmit, s.output)
  expectRefusedAsNewWork("a new keyed send to the running session", d.newOnRunning, s.output)

  expect(d.ran.error, s.output).toBeUndefined()
  expect(d.ran.status, d.ran.text).toBe(200)
  expect(d.ran.body.turn).toMatchObject({ status: "ended", result: { text: "slow done" } })
  expect(await s.waitExit(30_000), s.output).toEqual({ code: 0, signal: null })
  await d.arriving.closed
  const [head, body] = d.arriving.answer().split("\r\n\r\n")
  expect(head!.split("\r\n")[0], d.arriving.answer()).toBe("HTTP/1.1 200 OK")
  expect(body, "the arriving retry's stored answer, byte for byte").toBe(first.sent.text)
  expect(journalDigest(s.dataDir, answered), "the drain wrote nothing to the answered session's journal").toBe(d.journalBefore)
  expect(s.toolCalls().length, "the slow tool ran once").toBe(1)

  // Back up: the new keys were kept by nothing, so they run now; the answered keys still replay.
  await s.start()
  expect((await request(s.baseUrl, `/v1/sessions/${answered}/events?after=0`)).text).toBe(d.eventsBefore)
  const again = await send(s, answered, "one", "answered-send")
  expect(again.text).toBe(first.sent.text)
  const fresh = await send(s, answered, "three", "new-send")
  expect(fresh.status, fresh.text).toBe(200)
  expect(fresh.body.turn).toMatchObject({ status: "ended", result: { text: "third" } })
}

describe("keyed sends and submits retried during a graceful stop", () => {
  it("with the sessions in memory: an answered keyed send's retry gets its answer byte for byte and a submit's its receipt, a running keyed send's retry gets 409 in_flight, and a new key is refused 503 overloaded with nothing journaled and no turn started", async () => {
    const s = (server = await startServer())
    const { answered, slow } = await sessionsOf(s)
    const first = await answerBoth(s, answered)
    await expectDrain(s, first, await drainWithRetries(s, slow, answered), answered)
  }, 90_000)

  it("with the answered session not in memory (opened from its journal during the drain): its keys' retries get their answers, and a new key is refused 503 overloaded with nothing journaled", async () => {
    const s = (server = await startServer())
    const { answered, slow } = await sessionsOf(s)
    const first = await answerBoth(s, answered)
    // A graceful stop and a start: nothing of the answered session is in memory.
    await s.restart()
    await expectDrain(s, first, await drainWithRetries(s, slow, answered), answered)
  }, 90_000)
})

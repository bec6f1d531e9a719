/**
 * The HTTP API end to end (DESIGN §4, §6, §7; seed "Turns", "Reading Events", "Lifecycle"),
 * against real server processes on ports the kernel picks: test/fixtures/server.mjs (the compiled
 * composition root with the test Agentloop `emitter` and the tools `slow` and `hang`) and, where
 * only the product's own behaviour matters, `node bin/brain.js serve`.
 *
 * One shared server answers the tests that need no restart; the tests that stop, kill or drain a
 * server run their own.
 */
import * as crypto from "node:crypto"
import * as fs from "node:fs"
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import {
  ensureBuilt,
  eventually,
  type Reply,
  request,
  type RequestOptions,
  ServerProcess,
  sleep,
  startServer
} from "../support/server.js"
import { openSse } from "../support/sse.js"
import { helloLoop, padded } from "../support/wat.js"

/** Bytes: the shared server's BRAIN_MAX_REQUEST_BYTES, small so the 413 tests send little. */
const MAX_REQUEST_BYTES = 64 * 1024

/** A well-formed session id that no server minted. */
const UNKNOWN_ID = `ses_${"0".repeat(26)}`
const BAD_IDS = ["ses_short", "nope", `ses_${"0".repeat(25)}u`, `SES_${"0".repeat(26)}`]

/** A Wasm header and nothing else: Wasm magic, but no module of the ABI. */
const WASM = new Uint8Array([0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00])

const scripted = (replies?: ReadonlyArray<unknown>) => ({ provider: "scripted", ...(replies ? { replies } : {}) })
/** A model that asks for the `slow` tool (sleeping `ms`), then answers `text`. */
const slowModel = (ms: number, text = "done") => scripted([{ tool_calls: [{ name: "slow", input: { ms } }] }, { text }])
const SLOW_TOOLS = [{ name: "slow" }]

// ---------------------------------------------------------------------------------------------
// Helpers

/** A thin client over one server's base URL. */
class Client {
  constructor(readonly server: ServerProcess, readonly headers: Readonly<Record<string, string>> = {}) {}

  req(p: string, options: RequestOptions = {}): Promise<Reply> {
    return request(this.server.baseUrl, p, { ...options, headers: { ...this.headers, ...options.headers } })
  }

  create(body: unknown = { model: scripted() }, headers: Record<string, string> = {}) {
    return this.req("/v1/sessions", { json: body, headers })
  }

  async created(body: unknown = { model: scripted() }): Promise<string> {
    const r = await this.create(body)
    expect(r.status, r.text).toBe(201)
    return r.body.session_id
  }

  send(id: string, message: string, headers: Record<string, string> = {}, signal?: AbortSignal) {
    return this.req(`/v1/sessions/${id}/messages`, { json: { input: { message } }, headers, ...(signal ? { signal } : {}) })
  }

  submit(id: string, message: string, headers: Record<string, string> = {}) {
    return this.send(id, message, { prefer: "respond-async", ...headers })
  }

  get(id: string) {
    return this.req(`/v1/sessions/${id}`)
  }

  page(id: string, after = 0, limit?: number) {
    return this.req(`/v1/sessions/${id}/events?after=${after}${limit !== undefined ? `&limit=${limit}` : ""}`)
  }

  /** Every public Event after `after`, page by page until an empty page. */
  async allEvents(id: string, after = 0, limit?: number): Promise<{ events: Array<any>; pages: Array<number> }> {
    const events: Array<any> = []
    const pages: Array<number> = []
    let cursor = after
    for (;;) {
      const r = await this.page(id, cursor, limit)
      expect(r.status, r.text).toBe(200)
      pages.push(r.body.events.length)
      if (r.body.events.length === 0) return { events, pages }
      events.push(...r.body.events)
      expect(r.body.next_cursor).toBeGreaterThan(cursor)
      cursor = r.body.next_cursor
    }
  }

  /** Polls the Events until one of `kind` (closing `sequence`, when given) is there; returns it. */
  waitFor(id: string, kind: string, sequence?: number, deadlineMs = 10_000) {
    return eventually(`${kind} in ${id}`, async () => {
      const { events } = await this.allEvents(id)
      return events.find((e) => e.kind === kind && (sequence === undefined || e.data.sequence === sequence))
    }, deadlineMs)
  }

  transcript(id: string) {
    return this.req(`/v1/sessions/${id}/transcript`)
  }

  cancel(id: string, headers: Record<string, string> = {}) {
    return this.req(`/v1/sessions/${id}/cancel`, { method: "POST", headers })
  }

  end(id: string, headers: Record<string, string> = {}) {
    return this.req(`/v1/sessions/${id}/end`, { method: "POST", headers })
  }

  delete(id: string, headers: Record<string, string> = {}) {
    return this.req(`/v1/sessions/${id}`, { method: "DELETE", headers })
  }
}

/** Every non-2xx body is exactly `{code, message, retryable, details?}`, as JSON. */
const expectError = (r: Reply, status: number, code?: string) => {
  expect(r.status, `${r.status} ${r.text}`).toBe(status)
  expect(r.headers.get("content-type") ?? "", r.text).toMatch(/^application\/json/)
  expect(r.body, r.text).toBeTypeOf("object")
  const keys = Object.keys(r.body).sort()
  expect(keys.filter((k) => k !== "details"), r.text).toEqual(["code", "message", "retryable"])
  expect(keys.every((k) => ["code", "details", "message", "retryable"].includes(k)), r.text).toBe(true)
  expect(typeof r.body.code).toBe("string")
  expect(typeof r.body.message).toBe("string")
  expect(typeof r.body.retryable).toBe("boolean")
  if (code !== undefined) expect(r.body.code, r.text).toBe(code)
}

const expectSummary = (body: any, id: string, status: string) => {
  expect(Object.keys(body).sort()).toEqual(["last_sequence", "session_id", "status"])
  expect(body.session_id).toBe(id)
  expect(body.status).toBe(status)
  expect(Number.isInteger(body.last_sequence)).toBe(true)
}

const sequencesOf = (events: ReadonlyArray<any>) => events.map((e) => e.sequence as number)

const expectStrictlyIncreasing = (seqs: ReadonlyArray<number>, what: string) => {
  for (let i = 1; i < seqs.length; i++) {
    if (!(seqs[i]! > seqs[i - 1]!)) expect.fail(`${what}: sequence ${seqs[i]} follows ${seqs[i - 1]} at ${i}`)
  }
}

/** A raw request over node:http, for bodies fetch will not send (chunked, no content type). */
const rawRequest = (
  baseUrl: string,
  options: { method: string; path: string; headers?: Record<string, string>; chunks?: ReadonlyArray<string | Uint8Array> }
) =>
  new Promise<{ status: number; text: string; body: any; error?: string }>((resolve) => {
    const req = http.request(`${baseUrl}${options.path}`, { method: options.method, headers: options.headers, agent: false }, (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (c: string) => void (text += c))
      res.on("end", () => {
        let body: unknown
        try {
          body = JSON.parse(text)
        } catch {
          body = undefined
        }
        resolve({ status: res.statusCode ?? 0, text, body })
      })
      res.on("error", (err) => resolve({ status: res.statusCode ?? 0, text, body: undefined, error: String(err) }))
    })
    req.on("error", (err) => resolve({ status: 0, text: "", body: undefined, error: `${(err as NodeJS.ErrnoException).code}: ${err.message}` }))
    for (const c of options.chunks ?? []) req.write(c)
    req.end()
  })

beforeAll(ensureBuilt, 120_000)

// ---------------------------------------------------------------------------------------------
// One shared server

describe("the HTTP API against a running server", () => {
  let server: ServerProcess
  let api: Client

  beforeAll(async () => {
    server = await startServer({
      env: { BRAIN_MAX_REQUEST_BYTES: String(MAX_REQUEST_BYTES), BRAIN_MAX_EMITTED_BYTES: "0", BRAIN_SSE_HEARTBEAT_MS: "100" }
    })
    api = new Client(server)
  })
  afterAll(async () => {
    await server?.dispose()
  })

  it("health: live and ready answer 204 with no body", async () => {
    for (const p of ["/health/live", "/health/ready"]) {
      const r = await api.req(p)
      expect(r.status, p).toBe(204)
      expect(r.text, p).toBe("")
    }
  })

  it("a session's whole life: create 201, get, send 200, submit 202, events, transcript, cancel, end 200, delete 204, then 404", async () => {
    const created = await api.create({ model: scripted(), system: "be brief" })
    expect(created.status, created.text).toBe(201)
    expect(created.headers.get("content-type")).toMatch(/^application\/json/)
    const id: string = created.body.session_id
    expect(id).toMatch(/^ses_[0-9abcdefghjkmnpqrstvwxyz]{26}$/)
    expectSummary(created.body, id, "idle")

    const got = await api.get(id)
    expect(got.status).toBe(200)
    expectSummary(got.body, id, "idle")
    expect(got.body.last_sequence).toBe(created.body.last_sequence)

    // Sync send: the turn's outcome.
    const sent = await api.send(id, "hello")
    expect(sent.status, sent.text).toBe(200)
    expect(Object.keys(sent.body).sort()).toEqual(["last_sequence", "session_id", "status", "turn"])
    expect(sent.body).toMatchObject({ session_id: id, status: "idle", turn: { status: "ended", result: { text: "hello" } } })
    expect(sent.body.turn.sequence).toBe(created.body.last_sequence + 1)
    expect(sent.body.last_sequence).toBeGreaterThan(sent.body.turn.sequence)

    // Async submit: 202, Preference-Applied, and the receipt of the committed turn_started.
    const submitted = await api.submit(id, "and again")
    expect(submitted.status, submitted.text).toBe(202)
    expect(submitted.headers.get("preference-applied")).toBe("respond-async")
    expect(Object.keys(submitted.body).sort()).toEqual(["sequence", "session_id"])
    expect(submitted.body.session_id).toBe(id)
    const receipt: number = submitted.body.sequence
    const started = await api.page(id, receipt - 1, 1)
    expect(started.body.events[0]).toMatchObject({ sequence: receipt, kind: "turn_started", data: { input: { message: "and again" }, mode: "submit" } })
    await api.waitFor(id, "turn_ended", receipt)

    // The Events: envelopes, the creation record at sequence 1, dense and increasing, and an
    // empty page at the end.
    const first = await api.page(id, 0)
    expect(first.status).toBe(200)
    expect(Object.keys(first.body).sort()).toEqual(["events", "next_cursor"])
    const events: Array<any> = first.body.events
    expect(events[0]).toMatchObject({ session_id: id, sequence: 1, kind: "session_creation_started" })
    expect(events[0].data.configuration).toMatchObject({ agentloop: "official", system: "be brief", model: { provider: "scripted" } })
    for (const e of events) {
      expect(Object.keys(e).every((k) => ["session_id", "sequence", "recorded_at_ms", "kind", "data", "origin"].includes(k)), JSON.stringify(e)).toBe(true)
      expect(e.session_id).toBe(id)
      expect(Number.isInteger(e.recorded_at_ms)).toBe(true)
      expect(e.data).toBeTypeOf("object")
    }
    expectStrictlyIncreasing(sequencesOf(events), "events")
    expect(events.map((e) => e.kind)).toEqual(expect.arrayContaining(["session_creation_ended", "turn_started", "model_call_started", "model_call_ended", "turn_ended"]))
    // Private records stay private.
    expect(events.some((e) => ["transcript_delta", "kv_put", "kv_delete"].includes(e.kind))).toBe(false)
    const rest = await api.page(id, first.body.next_cursor)
    expect(rest.body.events).toEqual([])
    // A limited page.
    const two = await api.page(id, 0, 2)
    expect(sequencesOf(two.body.events)).toEqual(sequencesOf(events).slice(0, 2))
    expect(two.body.next_cursor).toBe(2)

    const transcript = await api.transcript(id)
    expect(transcript.status).toBe(200)
    expect(Object.keys(transcript.body).sort()).toEqual(["messages", "through_sequence"])
    expect(transcript.body.messages).toEqual([
      { role: "user", content: "hello" },
      { role: "assistant", content: "hello" },
      { role: "user", content: "and again" },
      { role: "assistant", content: "and again" }
    ])
    expect(transcript.body.through_sequence).toBeGreaterThan(receipt)

    // Cancel with nothing running: the summary.
    const cancelled = await api.cancel(id)
    expect(cancelled.status, cancelled.text).toBe(200)
    expectSummary(cancelled.body, id, "idle")

    const ended = await api.end(id)
    expect(ended.status, ended.text).toBe(200)
    expectSummary(ended.body, id, "ended")
    const endedEvents = await api.allEvents(id)
    expect(endedEvents.events.at(-1)).toMatchObject({ kind: "session_ended" })

    const deleted = await api.delete(id)
    expect(deleted.status, deleted.text).toBe(204)
    expect(deleted.text).toBe("")
    expectError(await api.get(id), 404, "not_found")
    expectError(await api.page(id), 404, "not_found")
    expectError(await api.transcript(id), 404, "not_found")
    expectError(await api.send(id, "hi"), 404, "not_found")
  })

  it("list: pages of at most `limit` sessions in id order, following next_cursor to null, without loss or duplicates", async () => {
    const mine = [await api.created(), await api.created(), await api.created(), await api.created(), await api.created()]
    const seen: Array<string> = []
    let after: string | undefined
    let pages = 0
    for (;;) {
      const r = await api.req(`/v1/sessions?limit=2${after ? `&after=${after}` : ""}`)
      expect(r.status, r.text).toBe(200)
      expect(Object.keys(r.body).sort()).toEqual(["next_cursor", "sessions"])
      expect(r.body.sessions.length).toBeLessThanOrEqual(2)
      for (const s of r.body.sessions) expectSummary(s, s.session_id, s.status)
      seen.push(...r.body.sessions.map((s: any) => s.session_id))
      pages++
      if (r.body.next_cursor === null) break
      expect(r.body.next_cursor).toBe(r.body.sessions.at(-1).session_id)
      after = r.body.next_cursor
      expect(pages).toBeLessThan(100)
    }
    expect(pages).toBeGreaterThanOrEqual(3)
    expect(new Set(seen).size).toBe(seen.length)
    expect([...seen].sort()).toEqual(seen)
    for (const id of mine) expect(seen).toContain(id)
    const all = await api.req("/v1/sessions?limit=1000")
    expect(all.body.sessions.map((s: any) => s.session_id)).toEqual(seen)
    expect(all.body.next_cursor).toBeNull()
    const dflt = await api.req("/v1/sessions")
    expect(dflt.status).toBe(200)
    for (const q of ["limit=0", "limit=1001", "limit=x", "after=nope", "after=ses_x", "bogus=1"]) {
      expectError(await api.req(`/v1/sessions?${q}`), 400, "invalid_request")
    }
  })

  it("bad requests: malformed JSON, unknown fields, wrong types, bad ids, unknown ids, bad cursors and keys are 4xx in the error shape, and write nothing", async () => {
    const id = await api.created()
    const before = (await api.get(id)).body.last_sequence
    const json = { "content-type": "application/json" }
    const messages = `/v1/sessions/${id}/messages`

    // Malformed JSON: 400, never 500.
    for (const raw of ["{", "{bad", "{\"input\":", "nul", "{\"input\":{\"message\":\"x\"}}}", "\u0000"]) {
      expectError(await api.req("/v1/sessions", { raw, headers: json }), 400, "invalid_request")
      expectError(await api.req(messages, { raw, headers: json }), 400, "invalid_request")
    }
    // Unknown fields, at the top and nested.
    expectError(await api.create({ model: scripted(), bogus: 1 }), 400, "invalid_request")
    expectError(await api.create({ model: { provider: "scripted", temperature: 1 } }), 400, "invalid_request")
    expectError(await api.req(messages, { json: { input: { message: "x" }, extra: 1 } }), 400, "invalid_request")
    expectError(await api.req(messages, { json: { input: { message: "x", extra: 1 } } }), 400, "invalid_request")
    // Wrong types and missing fields.
    for (const body of [{}, { model: 5 }, { model: "" }, { model: scripted(), system: 1 }, { model: scripted(), idle_ttl_ms: -1 }, { model: scripted(), idle_ttl_ms: 1.5 }, { model: scripted(), tools: {} }, { model: scripted(), transcript: [{ role: "robot", content: "x" }] }, [], "s", null, 7]) {
      expectError(await api.create(body), 400, "invalid_request")
    }
    for (const body of [{}, { input: "hi" }, { input: { message: 1 } }, { input: {} }, { input: null }, [], null]) {
      expectError(await api.req(messages, { json: body }), 400, "invalid_request")
    }
    // An empty JSON body where one is required.
    expectError(await api.req("/v1/sessions", { method: "POST", headers: json }), 400, "invalid_request")
    expectError(await api.req(messages, { method: "POST", headers: json }), 400, "invalid_request")
    // An agentloop that does not exist.
    expectError(await api.create({ agentloop: "no-such-loop", model: scripted() }), 400, "invalid_request")

    // Bad session ids on every route: 400; well-formed unknown ones: 404.
    for (const bad of BAD_IDS) {
      for (const [method, p] of [
        ["GET", `/v1/sessions/${bad}`],
        ["GET", `/v1/sessions/${bad}/events`],
        ["GET", `/v1/sessions/${bad}/transcript`],
        ["POST", `/v1/sessions/${bad}/cancel`],
        ["POST", `/v1/sessions/${bad}/end`],
        ["DELETE", `/v1/sessions/${bad}`]
      ] as const) {
        expectError(await api.req(p, { method }), 400, "invalid_request")
      }
      expectError(await api.send(bad, "x"), 400, "invalid_request")
    }
    expectError(await api.get(UNKNOWN_ID), 404, "not_found")
    expectError(await api.page(UNKNOWN_ID), 404, "not_found")
    expectError(await api.transcript(UNKNOWN_ID), 404, "not_found")
    expectError(await api.send(UNKNOWN_ID, "x"), 404, "not_found")
    expectError(await api.submit(UNKNOWN_ID, "x"), 404, "not_found")
    expectError(await api.cancel(UNKNOWN_ID), 404, "not_found")
    expectError(await api.end(UNKNOWN_ID), 404, "not_found")
    expectError(await api.delete(UNKNOWN_ID), 404, "not_found")
    const unknownSse = await openSse(server.url(`/v1/sessions/${UNKNOWN_ID}/events`))
    expect(unknownSse.status).toBe(404)
    unknownSse.close()

    // Bad cursors.
    for (const q of ["after=-1", "after=x", "after=1.5", "after=", "limit=0", "limit=5000", "limit=1001", "limit=-3", "limit=x", "bogus=1"]) {
      expectError(await api.req(`/v1/sessions/${id}/events?${q}`), 400, "invalid_request")
    }
    const badLastId = await openSse(server.url(`/v1/sessions/${id}/events`), { "last-event-id": "x" })
    expect(badLastId.status).toBe(400)
    badLastId.close()

    // Idempotency-Key present but empty or over 256 bytes.
    expectError(await api.send(id, "x", { "idempotency-key": "k".repeat(257) }), 400, "invalid_request")
    expectError(await api.send(id, "x", { "idempotency-key": "é".repeat(129) }), 400, "invalid_request")
    const emptyKey = await rawRequest(server.baseUrl, {
      method: "POST",
      path: messages,
      headers: { "content-type": "application/json", "idempotency-key": "" },
      chunks: [JSON.stringify({ input: { message: "x" } })]
    })
    expect(emptyKey.status, emptyKey.text).toBe(400)
    expect(emptyKey.body.code).toBe("invalid_request")

    // Media types: a body that is not JSON is 415.
    expectError(await api.req("/v1/sessions", { raw: JSON.stringify({ model: scripted() }), headers: { "content-type": "text/plain" } }), 415, "unsupported_media_type")
    expectError(await api.req(messages, { raw: "input=x", headers: { "content-type": "application/x-www-form-urlencoded" } }), 415, "unsupported_media_type")
    const noType = await rawRequest(server.baseUrl, { method: "POST", path: "/v1/sessions", chunks: [JSON.stringify({ model: scripted() })] })
    expect(noType.status, noType.text).toBe(415)
    expect(noType.body.code).toBe("unsupported_media_type")

    // Unknown routes are 404 in the same shape; a method a known path does not take is 405.
    expectError(await api.req("/v1/nope"), 404, "not_found")
    expectError(await api.req("/v1/sessions", { method: "PUT", json: {} }), 405, "method_not_allowed")

    // Nothing reached the journal.
    const after = await api.get(id)
    expect(after.body.last_sequence).toBe(before)
    expect((await api.allEvents(id)).events.map((e) => e.kind)).toEqual(["session_creation_started", "session_creation_ended"])
  })

  it("a tool's timeout_ms is 1 to 2,147,483,647 (Node's timer maximum), as idle_ttl_ms is bounded: past it the create is 400 naming tools[i].timeout_ms and no session is made; at it the tool's call runs with that deadline", async () => {
    const sessionsNow = async () => (await api.req("/v1/sessions?limit=1000")).body.sessions.length as number
    const before = await sessionsNow()
    for (const timeout_ms of [2 ** 31, 9007199254740991, 0]) {
      const r = await api.create({ model: scripted(), tools: [{ name: "slow" }, { name: "hang", timeout_ms }] })
      expectError(r, 400, "invalid_request")
      expect(r.body.details, r.text).toContainEqual(expect.objectContaining({ path: ["tools", 1, "timeout_ms"] }))
    }
    expect(await sessionsNow()).toBe(before)
    const id = await api.created({ model: slowModel(10), tools: [{ name: "slow", timeout_ms: 2 ** 31 - 1 }] })
    const sent = await api.send(id, "go")
    expect(sent.status, sent.text).toBe(200)
    expect(sent.body.turn.status, sent.text).toBe("ended")
    const started = (await api.allEvents(id)).events.find((e) => e.kind === "tool_call_started")
    // The lower of it and the server's BRAIN_MAX_TOOL_SECS.
    expect(Number.isSafeInteger(started.data.deadline_at_ms)).toBe(true)
    expect(started.data.deadline_at_ms).toBeGreaterThan(started.recorded_at_ms)
    expect(started.data.deadline_at_ms).toBeLessThanOrEqual(started.recorded_at_ms + 2 ** 31 - 1)
  })

  it("a body over BRAIN_MAX_REQUEST_BYTES with a declared length is answered 413, and nothing is written", async () => {
    const id = await api.created()
    const big = JSON.stringify({ input: { message: "x".repeat(MAX_REQUEST_BYTES * 3) } })
    expectError(await api.req(`/v1/sessions/${id}/messages`, { raw: big, headers: { "content-type": "application/json" } }), 413, "payload_too_large")
    expectError(await api.req("/v1/sessions", { raw: big, headers: { "content-type": "application/json" } }), 413, "payload_too_large")
    // The agentloop route's raw body too.
    const wasm = new Uint8Array(MAX_REQUEST_BYTES * 2)
    wasm.set(WASM)
    expectError(await api.req("/v1/agentloops", { raw: wasm, headers: { "content-type": "application/wasm" } }), 413, "payload_too_large")
    // Just under the limit is fine.
    const fits = JSON.stringify({ input: { message: "y".repeat(MAX_REQUEST_BYTES - 100) } })
    expect((await api.req(`/v1/sessions/${id}/messages`, { raw: fits, headers: { "content-type": "application/json" } })).status).toBe(200)
    expect((await api.get(id)).body.last_sequence).toBeGreaterThan(2)
    const before = (await api.get(id)).body.last_sequence
    expectError(await api.req(`/v1/sessions/${id}/messages`, { raw: big, headers: { "content-type": "application/json" } }), 413, "payload_too_large")
    expect((await api.get(id)).body.last_sequence).toBe(before)
  })

  it("a chunked body (no content-length) over BRAIN_MAX_REQUEST_BYTES is answered 413 without resetting the connection", async () => {
    const id = await api.created()
    const big = JSON.stringify({ input: { message: "x".repeat(MAX_REQUEST_BYTES * 3) } })
    const chunks: Array<string> = []
    for (let i = 0; i < big.length; i += 8192) chunks.push(big.slice(i, i + 8192))
    const chunked = await rawRequest(server.baseUrl, {
      method: "POST",
      path: `/v1/sessions/${id}/messages`,
      headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
      chunks
    })
    expect(chunked.error, `the connection failed instead of answering 413: ${chunked.error}`).toBeUndefined()
    expect(chunked.status, chunked.text).toBe(413)
    expect(chunked.body.code).toBe("payload_too_large")
    expect((await api.get(id)).body.last_sequence).toBe(2)
  })

  it("a chunked Wasm upload (no content-length) over BRAIN_MAX_REQUEST_BYTES is refused 413", async () => {
    const wasm = new Uint8Array(MAX_REQUEST_BYTES * 2)
    wasm.set(WASM)
    wasm[100] = 7 // not the module admitted elsewhere
    const chunks: Array<Uint8Array> = []
    for (let i = 0; i < wasm.length; i += 8192) chunks.push(wasm.subarray(i, i + 8192))
    const r = await rawRequest(server.baseUrl, {
      method: "POST",
      path: "/v1/agentloops",
      headers: { "content-type": "application/wasm", "transfer-encoding": "chunked" },
      chunks
    })
    expect(r.error, `the connection failed instead of answering 413: ${r.error}`).toBeUndefined()
    expect(r.status, r.text).toBe(413)
    expect(r.body?.code).toBe("payload_too_large")
    const id = crypto.createHash("sha256").update(wasm).digest("hex")
    expect(fs.existsSync(`${server.dataDir}/agentloops/${id}.wasm`), "the oversized module was stored").toBe(false)
  })

  it("POST /v1/agentloops: a module of the ABI is admitted under its SHA-256 (201) and runs; other bytes 400; another media type 415", async () => {
    const loop = await helloLoop()
    const expected = crypto.createHash("sha256").update(loop).digest("hex")
    const r = await api.req("/v1/agentloops", { raw: loop, headers: { "content-type": "application/wasm" } })
    expect(r.status, r.text).toBe(201)
    expect(r.body).toEqual({ id: expected, bytes: loop.length, loop: true, tool: false })
    const again = await api.req("/v1/agentloops", { raw: loop, headers: { "content-type": "application/wasm" } })
    expect(again.status).toBe(201)
    expect(again.body.id).toBe(expected)
    expect(fs.existsSync(`${server.dataDir}/agentloops/${expected}.wasm`)).toBe(true)
    expectError(await api.req("/v1/agentloops", { raw: WASM, headers: { "content-type": "application/wasm" } }), 400, "invalid_request")
    expectError(await api.req("/v1/agentloops", { raw: new Uint8Array([1, 2, 3, 4, 5, 6, 7, 8]), headers: { "content-type": "application/wasm" } }), 400, "invalid_request")
    expectError(await api.req("/v1/agentloops", { raw: new Uint8Array(0), headers: { "content-type": "application/wasm" } }), 400, "invalid_request")
    expectError(await api.req("/v1/agentloops", { raw: loop, headers: { "content-type": "application/json" } }), 415, "unsupported_media_type")
    expectError(await api.req("/v1/agentloops", { raw: loop, headers: { "content-type": "text/plain" } }), 415, "unsupported_media_type")
    expectError(await api.req("/v1/agentloops", { raw: loop, headers: { "content-type": "application/octet-stream" } }), 415, "unsupported_media_type")
    // The admitted module names an agentloop a session can be created with, and it runs.
    const created = await api.create({ agentloop: expected, model: scripted() })
    expect(created.status).toBe(201)
    const sent = await api.send(created.body.session_id, "hi")
    expect(sent.body.turn).toMatchObject({ status: "ended", result: "hello from wasm" })
    // An unknown id is refused at create, not at the first turn.
    expectError(await api.create({ agentloop: "f".repeat(64), model: scripted() }), 400, "invalid_request")
  })

  it("one turn at a time: a second send or submit while a turn runs is 409 session_busy; delete before end 409; cancel closes the turn; after end, messages are 409 session_ended", async () => {
    // The racing requests all come while this turn's tool runs: long enough for a loaded machine.
    // A tool far longer than the test: only the cancel ends it.
    const id = await api.created({ model: slowModel(600_000, "second turn"), tools: SLOW_TOOLS })
    const receipt = await api.submit(id, "work")
    expect(receipt.status, receipt.text).toBe(202)
    await api.waitFor(id, "tool_call_started")
    expect((await api.get(id)).body.status).toBe("running")

    // Many at once: every one is refused, none queued.
    const racing = await Promise.all(Array.from({ length: 8 }, (_, i) => (i % 2 ? api.send(id, "race") : api.submit(id, "race"))))
    for (const r of racing) expectError(r, 409, "session_busy")
    const busy = await api.send(id, "me too")
    expectError(busy, 409, "session_busy")
    expect(busy.body.retryable).toBe(true)
    expectError(await api.submit(id, "me too"), 409, "session_busy")
    expectError(await api.delete(id), 409, "conflict")

    // Answered at all within the test's timeout: without waiting for the tool.
    const cancelled = await api.cancel(id)
    expect(cancelled.status, cancelled.text).toBe(200)
    expectSummary(cancelled.body, id, "idle")
    const { events } = await api.allEvents(id)
    expect(events.find((e) => e.kind === "tool_call_ended" || e.kind === "tool_call_failed")?.data).toMatchObject({ outcome: "cancelled" })
    expect(events.find((e) => e.kind === "turn_failed")).toMatchObject({ data: { sequence: receipt.body.sequence, failure: { code: "cancelled" } } })

    // The session is usable: the next turn gets the model's next reply.
    const next = await api.send(id, "go on")
    expect(next.status, next.text).toBe(200)
    expect(next.body.turn).toMatchObject({ status: "ended", result: { text: "second turn" } })

    const ended = await api.end(id)
    expect(ended.status).toBe(200)
    expectError(await api.send(id, "late"), 409, "session_ended")
    expectError(await api.submit(id, "late"), 409, "session_ended")
    const last = (await api.get(id)).body.last_sequence
    // Ending twice answers the summary again.
    expect((await api.end(id)).body).toEqual(ended.body)
    expect((await api.get(id)).body.last_sequence).toBe(last)
    expect((await api.delete(id)).status).toBe(204)
  })

  it("a turn that fails is still a completed sync request: 200 with turn.status failed and its failure; of concurrent first messages exactly one is admitted", async () => {
    const id = await api.created({ model: scripted([{ fail: { code: "boom", message: "the model fell over" } }, { text: "fine", delay_ms: 300 }]) })
    const failed = await api.send(id, "fail please")
    expect(failed.status, failed.text).toBe(200)
    expect(failed.body.status).toBe("idle")
    expect(failed.body.turn.status).toBe("failed")
    expect(failed.body.turn.failure).toMatchObject({ code: expect.any(String), message: expect.any(String), retryable: expect.any(Boolean), ambiguous: expect.any(Boolean) })
    expect(failed.body.turn.result).toBeUndefined()
    // Concurrent messages on an idle session: one turn, the others session_busy.
    const racing = await Promise.all(Array.from({ length: 6 }, () => api.send(id, "race")))
    const ok = racing.filter((r) => r.status === 200)
    expect(ok.length, racing.map((r) => r.status).join(",")).toBe(1)
    expect(ok[0]!.body.turn).toMatchObject({ status: "ended", result: { text: "fine" } })
    for (const r of racing.filter((r) => r.status !== 200)) expectError(r, 409, "session_busy")
    expect((await api.allEvents(id)).events.filter((e) => e.kind === "turn_started").length).toBe(2)
  })

  it("SSE: catches up from `after`, follows live, frames carry id/event/data with the whole envelope; Last-Event-ID resumes without duplicates or gaps; the stream ends after session_ended", async () => {
    const id = await api.created({ agentloop: "emitter", model: scripted() })
    const live = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), {}, true)
    expect(live.status).toBe(200)
    expect(live.headers["content-type"]).toMatch(/^text\/event-stream/)
    await live.until("the catch-up", () => live.sequences.length >= 2)
    expect(live.frames.slice(0, 2).map((f) => f.event)).toEqual(["session_creation_started", "session_creation_ended"])

    // Live: a turn that emits 5 Events.
    const sent = await api.send(id, "5")
    expect(sent.status, sent.text).toBe(200)
    await live.until("the live turn", () => live.frames.some((f) => f.event === "turn_ended"))
    const { events } = await api.allEvents(id)
    expect(live.sequences).toEqual(sequencesOf(events))
    for (const [i, f] of live.frames.entries()) {
      expect(f.id).toBe(String(events[i].sequence))
      expect(f.event).toBe(events[i].kind)
      expect(f.json).toEqual(events[i])
    }
    // Frame layout: `id:`, `event:`, `data:` lines, then a blank line.
    expect(live.raw).toMatch(/id: 1\nevent: session_creation_started\ndata: \{[^\n]*\}\n\n/)
    const ticks = live.frames.filter((f) => f.event === "tick")
    expect(ticks.map((f) => f.json.data.i)).toEqual([0, 1, 2, 3, 4])
    const activation = live.frames.find((f) => f.event === "activation_started")!
    for (const t of ticks) expect(t.json.origin).toEqual({ kind: "agentloop", sequence: Number(activation.id) })

    // Disconnect, let more happen, reconnect with Last-Event-ID.
    const lastSeen = live.sequences.at(-1)!
    live.close()
    expect((await api.send(id, "3")).status).toBe(200)
    const resumed = await openSse(server.url(`/v1/sessions/${id}/events`), { "last-event-id": String(lastSeen) })
    await resumed.until("the second turn", () => resumed.frames.some((f) => f.event === "turn_ended"))
    expect(resumed.sequences[0]).toBeGreaterThan(lastSeen)
    const all = (await api.allEvents(id)).events
    expect([...live.sequences, ...resumed.sequences]).toEqual(sequencesOf(all))

    // End: the stream delivers session_ended, then ends.
    expect((await api.end(id)).status).toBe(200)
    await resumed.done
    expect(resumed.ended).toBe("end")
    expect(resumed.frames.at(-1)?.event).toBe("session_ended")
    const final = (await api.allEvents(id)).events
    expect([...live.sequences, ...resumed.sequences]).toEqual(sequencesOf(final))

    // An ended session: a stream catches up and ends at once.
    const replay = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    await replay.done
    expect(replay.sequences).toEqual(sequencesOf(final))
    // `after` in the query, mid-history.
    const mid = sequencesOf(final)[5]!
    const fromMid = await openSse(server.url(`/v1/sessions/${id}/events?after=${mid}`))
    await fromMid.done
    expect(fromMid.sequences).toEqual(sequencesOf(final).filter((s) => s > mid))
  })

  it("SSE: a reconnecting EventSource (the same URL with ?after=, plus the Last-Event-ID it saw) resumes after Last-Event-ID, without duplicates", async () => {
    const id = await api.created({ agentloop: "emitter", model: scripted() })
    expect((await api.send(id, "4")).status).toBe(200)
    const { events } = await api.allEvents(id)
    const seen = events[4].sequence
    // What EventSource sends when it reconnects: its original URL, and the last id it received.
    const reconnected = await openSse(server.url(`/v1/sessions/${id}/events?after=0`), { "last-event-id": String(seen) })
    await reconnected.until("the rest of the turn", () => reconnected.frames.some((f) => f.event === "turn_ended"))
    expect(reconnected.sequences).toEqual(sequencesOf(events).filter((s) => s > seen))
    reconnected.close()
  })

  it("a session created with an opening transcript: it is the transcript, and the next turn extends it", async () => {
    const opening = [{ role: "user", content: "earlier question" }, { role: "assistant", content: "earlier answer" }]
    const id = await api.created({ model: scripted(), transcript: opening })
    const before = await api.transcript(id)
    expect(before.body.messages).toEqual(opening)
    expect((await api.send(id, "now")).status).toBe(200)
    const after = await api.transcript(id)
    expect(after.body.messages).toEqual([...opening, { role: "user", content: "now" }, { role: "assistant", content: "now" }])
    expect(after.body.through_sequence).toBeGreaterThan(before.body.through_sequence)
  })

  it("1,080 emitted Events over three turns: pages of at most 1,000 cross the boundary without loss or duplicates, and SSE delivers the same, unpaged by `limit`", async () => {
    const id = await api.created({ agentloop: "emitter", model: scripted() })
    const live = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    for (let turn = 0; turn < 3; turn++) {
      const r = await api.send(id, "360")
      expect(r.status, r.text).toBe(200)
      expect(r.body.turn).toMatchObject({ status: "ended", result: { emitted: 360 } })
    }
    const full = await api.allEvents(id)
    expect(full.pages[0]).toBe(1000)
    expect(full.pages.length).toBe(3) // 1000, the rest, then empty
    const events = full.events
    expectStrictlyIncreasing(sequencesOf(events), "pages")
    const ticks = events.filter((e) => e.kind === "tick")
    expect(ticks.length).toBe(1080)
    // Each turn's 360 ticks, in order, once.
    const byActivation = new Map<number, Array<number>>()
    for (const t of ticks) {
      const list = byActivation.get(t.origin.sequence) ?? []
      list.push(t.data.i)
      byActivation.set(t.origin.sequence, list)
    }
    expect([...byActivation.values()]).toEqual([0, 1, 2].map(() => Array.from({ length: 360 }, (_, i) => i)))
    // 2 creation Events + 3 turns × (turn_started, activation_started, 360 ticks, activation_ended, turn_ended).
    expect(events.length).toBe(2 + 3 * 364)
    // The 1,000-Event boundary falls inside the second turn's ticks.
    expect(events[999].kind).toBe("tick")
    expect(events[1000].kind).toBe("tick")
    // Other page sizes see exactly the same.
    expect(sequencesOf((await api.allEvents(id, 0, 333)).events)).toEqual(sequencesOf(events))
    expect(sequencesOf((await api.allEvents(id, 0, 1000)).events)).toEqual(sequencesOf(events))
    // The live stream, opened before the turns, saw exactly the same Events.
    await live.until("all 1,094 live Events", () => live.frames.length >= events.length)
    expect(live.frames.map((f) => f.json)).toEqual(events)
    live.close()
    // A catch-up stream from 0 crosses its own page boundary.
    const caughtUp = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    await caughtUp.until("all 1,094 caught-up Events", () => caughtUp.frames.length >= events.length)
    expect(caughtUp.frames.map((f) => f.json)).toEqual(events)
    await sleep(100)
    expect(caughtUp.frames.length).toBe(events.length)
    caughtUp.close()
    // A stream checks `limit` as a page does, and is never paged by it: limit=5 sends every Event.
    const unpaged = await openSse(server.url(`/v1/sessions/${id}/events?after=0&limit=5`))
    await unpaged.until("all 1,094 Events despite limit=5", () => unpaged.frames.length >= events.length)
    expect(unpaged.frames.map((f) => f.json)).toEqual(events)
    unpaged.close()
  })

  it("pages hold about 8 MiB of Events at most; an Event larger than that comes alone so the cursor advances; SSE delivers them too", async () => {
    const id = await api.created({ agentloop: "emitter", model: scripted() })
    const BIG = 9 * 1024 * 1024
    const r = await api.send(id, `3 ${BIG}`)
    expect(r.status, r.text.slice(0, 300)).toBe(200)
    const { events, pages } = await api.allEvents(id)
    const ticks = events.filter((e) => e.kind === "tick")
    expect(ticks.map((t) => t.data.i)).toEqual([0, 1, 2])
    expect(ticks.every((t) => t.data.pad.length === BIG)).toBe(true)
    expectStrictlyIncreasing(sequencesOf(events), "pages")
    // creation ×2, turn_started, activation_started | tick 0 | tick 1 | tick 2 | activation_ended, turn_ended | empty
    expect(pages).toEqual([4, 1, 1, 1, 2, 0])
    const stream = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
    await stream.until("the large Events on the stream", () => stream.frames.some((f) => f.event === "turn_ended"), 20_000)
    expect(stream.sequences).toEqual(sequencesOf(events))
    stream.close()
  })

  it("SSE sends heartbeat comments while nothing happens (BRAIN_SSE_HEARTBEAT_MS)", async () => {
    const id = await api.created()
    const stream = await openSse(server.url(`/v1/sessions/${id}/events?after=2`))
    await stream.until("two heartbeats", () => stream.comments.filter((c) => c === "heartbeat").length >= 2, 3_000)
    expect(stream.frames).toEqual([])
    stream.close()
  })

  it("GET /openapi.json serves the OpenAPI 3.1 document of the contract", async () => {
    const r = await api.req("/openapi.json")
    expect(r.status, r.text.slice(0, 300)).toBe(200)
    expect(r.headers.get("content-type")).toMatch(/json/)
    expect(String(r.body.openapi)).toMatch(/^3\.1/)
    for (const p of ["/v1/sessions", "/v1/sessions/{id}", "/v1/sessions/{id}/messages", "/v1/sessions/{id}/events", "/v1/sessions/{id}/transcript", "/v1/sessions/{id}/cancel", "/v1/sessions/{id}/end", "/v1/agentloops", "/health/live", "/health/ready"]) {
      expect(Object.keys(r.body.paths), p).toContain(p)
    }
  })

  it("the served OpenAPI document tells what the server does: bearer auth on /v1 (the host's own token on its routes), the SSE form of Events with Last-Event-ID, the listener's statuses, the module upload's body, host routes' Idempotency-Key, and the response headers the contract names", async () => {
    const doc = (await api.req("/openapi.json")).body
    const operations = Object.entries<Record<string, any>>(doc.paths).flatMap(([p, ops]) => Object.entries<any>(ops).map(([m, op]) => ({ route: `${m.toUpperCase()} ${p}`, op })))
    const op = (route: string) => operations.find((o) => o.route === route)!.op
    // Auth: a bearer token, the server's or (on a host's own routes) the host's; none on health.
    expect(doc.components.securitySchemes.bearer).toMatchObject({ type: "http", scheme: "bearer" })
    expect(doc.components.securitySchemes.hostToken).toMatchObject({ type: "http", scheme: "bearer" })
    for (const { op: operation, route } of operations) {
      const hostOwn = /\/v1\/hosts\/\{id\}/.test(route)
      const expected = route.includes("/health/") ? [] : [{ [hostOwn ? "hostToken" : "bearer"]: [] }]
      expect(operation.security, route).toEqual(expected)
      // Any request may be refused by the listener (too slow, an unknown Expect, headers too large, unparsable).
      for (const status of ["400", "408", "417", "431"]) {
        expect(operation.responses[status]?.content?.["application/json"]?.schema, `${route} ${status}`).toBeDefined()
      }
      if (!route.includes("/health/")) expect(operation.responses["401"].headers["WWW-Authenticate"], route).toBeDefined()
      if (operation.responses["503"] !== undefined) expect(operation.responses["503"].headers["Retry-After"], route).toBeDefined()
    }
    // 405 belongs to no operation (it answers a method a path lacks): its answer is a component, with Allow.
    expect(doc.components.responses.MethodNotAllowed.headers.Allow).toBeDefined()
    expect(doc.components.schemas.MethodNotAllowed.properties.code.enum).toEqual(["method_not_allowed"])
    // The SSE form of the Events route, and its resume header.
    const events = op("GET /v1/sessions/{id}/events")
    expect(Object.keys(events.responses["200"].content).sort()).toEqual(["application/json", "text/event-stream"])
    expect(events.parameters.find((p: any) => p.name === "Last-Event-ID")).toMatchObject({ in: "header", required: false })
    // The module upload's body.
    expect(op("POST /v1/agentloops").requestBody).toMatchObject({ required: true, content: { "application/wasm": { schema: { type: "string" } } } })
    // Every mutating route declares the Idempotency-Key it checks, the host routes included.
    for (const { op: operation, route } of operations.filter((o) => /^(POST|DELETE) /.test(o.route))) {
      expect(operation.parameters.find((p: any) => p.name === "idempotency-key"), route).toMatchObject({ in: "header", required: false })
    }
    expect(op("POST /v1/sessions/{id}/messages").responses["202"].headers["Preference-Applied"]).toMatchObject({ required: true })
    // What the document says is what the server does.
    expect((await api.req("/v1/hosts", { method: "POST", headers: { "idempotency-key": "k".repeat(300) } })).status).toBe(400)
    const id = await api.created()
    const stream = await api.req(`/v1/sessions/${id}/events`, { headers: { accept: "text/event-stream", "last-event-id": "x" } })
    expect(stream.status).toBe(400)
  })

  it("async submit: the receipt's sequence is the committed turn_started; Events read from it show the turn's end", async () => {
    // The tool outlasts the receipt and the look that follows it, on a loaded machine too.
    const id = await api.created({ model: slowModel(3_000, "late answer"), tools: SLOW_TOOLS })
    const r = await api.submit(id, "take your time", { "idempotency-key": "submit-receipt" })
    expect(r.status, r.text).toBe(202)
    const receipt = r.body.sequence
    // The answer did not wait for the turn.
    expect((await api.allEvents(id)).events.some((e) => e.kind === "turn_ended")).toBe(false)
    const stream = await openSse(server.url(`/v1/sessions/${id}/events?after=${receipt - 1}`))
    let cursor = receipt - 1
    const seen: Array<any> = []
    await eventually("turn_ended after the receipt", async () => {
      const page = await api.page(id, cursor)
      seen.push(...page.body.events)
      cursor = page.body.next_cursor
      return seen.find((e) => e.kind === "turn_ended") ?? undefined
    })
    expect(seen[0]).toMatchObject({ sequence: receipt, kind: "turn_started", data: { mode: "submit", input: { message: "take your time" } } })
    expect(seen.find((e) => e.kind === "turn_ended").data.sequence).toBe(receipt)
    expect(seen.find((e) => e.kind === "tool_call_ended").data).toMatchObject({ outcome: "ok" })
    await stream.until("turn_ended on the stream", () => stream.frames.some((f) => f.event === "turn_ended"))
    expect(stream.sequences[0]).toBe(receipt)
    stream.close()
    const summary = await api.get(id)
    expect(summary.body.status).toBe("idle")
    expect((await api.transcript(id)).body.messages.at(-1)).toEqual({ role: "assistant", content: "late answer" })
  })

  it("idempotency: replays return the identical status and bytes (create, send, submit, end); a different body is 409 conflict; submit and send have separate scopes", async () => {
    const body = { model: scripted(), system: "idem" }
    const c1 = await api.create(body, { "idempotency-key": "create-1" })
    expect(c1.status).toBe(201)
    const c2 = await api.create(body, { "idempotency-key": "create-1" })
    expect(c2.status).toBe(201)
    expect(c2.text).toBe(c1.text)
    expectError(await api.create({ model: scripted(), system: "other" }, { "idempotency-key": "create-1" }), 409, "conflict")
    const id = c1.body.session_id
    // Concurrent requests under one fresh key: one executes; the others replay it or are told it is in progress.
    const together = await Promise.all(Array.from({ length: 6 }, () => api.create({ model: scripted(), system: "together" }, { "idempotency-key": "create-2" })))
    const winners = new Set(together.filter((r) => r.status === 201).map((r) => r.text))
    expect(winners.size, together.map((r) => `${r.status} ${r.text}`).join("\n")).toBe(1)
    for (const r of together.filter((r) => r.status !== 201)) {
      expectError(r, 409, "ambiguous")
      expect(r.body.retryable).toBe(true)
    }
    const listed = (await api.req("/v1/sessions?limit=1000")).body.sessions.map((x: any) => x.session_id)
    const togetherIds = []
    for (const sid of listed) {
      const first = await api.page(sid, 0, 1)
      if (first.body.events[0]?.data.configuration.system === "together") togetherIds.push(sid)
    }
    expect(togetherIds.length).toBe(1)

    const s1 = await api.send(id, "one", { "idempotency-key": "k" })
    expect(s1.status).toBe(200)
    const afterSend = (await api.get(id)).body.last_sequence
    const s2 = await api.send(id, "one", { "idempotency-key": "k" })
    expect(s2.status).toBe(200)
    expect(s2.text).toBe(s1.text)
    expect((await api.get(id)).body.last_sequence).toBe(afterSend) // not executed again
    expectError(await api.send(id, "two", { "idempotency-key": "k" }), 409, "conflict")

    // The same key as an async submission is another scope: it runs.
    const a1 = await api.submit(id, "one", { "idempotency-key": "k" })
    expect(a1.status, a1.text).toBe(202)
    expect(a1.body.sequence).toBe(afterSend + 1)
    await api.waitFor(id, "turn_ended", a1.body.sequence)
    const a2 = await api.submit(id, "one", { "idempotency-key": "k" })
    expect(a2.status).toBe(202)
    expect(a2.text).toBe(a1.text)
    expect(a2.headers.get("preference-applied")).toBe("respond-async")
    expectError(await api.submit(id, "three", { "idempotency-key": "k" }), 409, "conflict")
    // …and the sync scope still replays its own answer.
    expect((await api.send(id, "one", { "idempotency-key": "k" })).text).toBe(s1.text)
    const turns = (await api.allEvents(id)).events.filter((e) => e.kind === "turn_started")
    expect(turns.length).toBe(2)

    const e1 = await api.end(id, { "idempotency-key": "end-1" })
    expect(e1.status).toBe(200)
    const e2 = await api.end(id, { "idempotency-key": "end-1" })
    expect(e2.status).toBe(200)
    expect(e2.text).toBe(e1.text)

    // A refusal is an answer too: replayed as recorded.
    const r1 = await api.send(id, "late", { "idempotency-key": "late-1" })
    expectError(r1, 409, "session_ended")
    const r2 = await api.send(id, "late", { "idempotency-key": "late-1" })
    expect(r2.status).toBe(409)
    expect(r2.text).toBe(r1.text)

    const d1 = await api.delete(id, { "idempotency-key": "delete-1" })
    expect(d1.status).toBe(204)
    const d2 = await api.delete(id, { "idempotency-key": "delete-1" })
    expect(d2.status).toBe(204)
    // The claims outlive the session.
    expect((await api.create(body, { "idempotency-key": "create-1" })).text).toBe(c1.text)
  })

  it("a sync send whose client disconnects mid-turn: the turn ends normally, and a retry with the same key returns its recorded 200", async () => {
    // The tool outlasts the retry and the abort that follow its start, on a loaded machine too.
    const id = await api.created({ model: slowModel(5_000, "finished anyway"), tools: SLOW_TOOLS })
    const abort = new AbortController()
    const pending = api.send(id, "go", { "idempotency-key": "gone-1" }, abort.signal).then(
      () => "answered",
      (err: Error) => err.name
    )
    await api.waitFor(id, "tool_call_started")
    // While it runs, a retry with the key is told it is still in progress.
    const early = await api.send(id, "go", { "idempotency-key": "gone-1" })
    expectError(early, 409, "ambiguous")
    expect(early.body.retryable).toBe(true)
    abort.abort()
    expect(await pending).toBe("AbortError")
    const ended = await api.waitFor(id, "turn_ended", undefined, 30_000)
    const { events } = await api.allEvents(id)
    expect(events.some((e) => e.kind === "turn_failed")).toBe(false)
    expect(events.find((e) => e.kind === "tool_call_ended").data).toMatchObject({ outcome: "ok" })
    // The answer is recorded once the turn has ended; a retry in between is told to wait.
    const retry = await eventually("the recorded answer", async () => {
      const r = await api.send(id, "go", { "idempotency-key": "gone-1" })
      if (r.status === 409 && r.body.code === "ambiguous" && r.body.retryable === true) return undefined
      return r
    }, 30_000, 50)
    expect(retry.status, retry.text).toBe(200)
    expect(retry.body.turn).toMatchObject({ sequence: ended.data.sequence, status: "ended", result: { text: "finished anyway" } })
    expect((await api.allEvents(id)).events.filter((e) => e.kind === "turn_started").length).toBe(1)
    expect(server.toolCalls().filter((c) => c.session === id).length).toBe(1)
  })
})

// ---------------------------------------------------------------------------------------------
// Auth and startup refusal (the product: `node bin/brain.js serve`)

describe("the product: node bin/brain.js serve", () => {
  it("with BRAIN_API_TOKEN: no or a wrong bearer is 401, /health/* is open, the right token works, the startup hint's curl sends the token by its variable (never the secret); SIGTERM exits 0 and releases the lock", async () => {
    const token = "s3cret-token"
    const server = await startServer({ entry: "product", env: { BRAIN_API_TOKEN: token } })
    try {
      const messageOf = (line: string) => {
        try {
          return String(JSON.parse(line).message ?? line)
        } catch {
          return line
        }
      }
      // Printed just after the listening line the harness waits for.
      const hint = await eventually("the startup hint", async () => server.lines.map(messageOf).find((l) => l.includes("try: curl")))
      expect(hint, server.output).toContain(`-H "Authorization: Bearer $BRAIN_API_TOKEN"`)
      expect(server.output).not.toContain(token)
      const none = new Client(server)
      const wrong = new Client(server, { authorization: "Bearer wrong" })
      const right = new Client(server, { authorization: `Bearer ${token}` })
      expectError(await none.req("/v1/sessions"), 401, "unauthorized")
      expectError(await wrong.req("/v1/sessions"), 401, "unauthorized")
      expectError(await new Client(server, { authorization: token }).req("/v1/sessions"), 401, "unauthorized")
      expectError(await new Client(server, { authorization: `bearer  ${token}x` }).req("/v1/sessions"), 401, "unauthorized")
      expectError(await none.create(), 401, "unauthorized")
      expectError(await wrong.send(UNKNOWN_ID, "x"), 401, "unauthorized")
      expectError(await none.req("/v1/agentloops", { raw: WASM, headers: { "content-type": "application/wasm" } }), 401, "unauthorized")
      expect((await none.req("/health/live")).status).toBe(204)
      expect((await none.req("/health/ready")).status).toBe(204)
      const id = await right.created()
      expect((await right.get(id)).status).toBe(200)
      expect((await right.send(id, "hi")).body.turn.result).toEqual({ text: "hi" })
      expectError(await none.get(id), 401, "unauthorized")
      expectError(await none.page(id), 401, "unauthorized")
      const sse = await openSse(server.url(`/v1/sessions/${id}/events`))
      expect(sse.status).toBe(401)
      sse.close()
      expect(fs.existsSync(server.lockFile)).toBe(true)
      const exit = await server.stop()
      expect(exit, server.output).toEqual({ code: 0, signal: null })
      expect(fs.existsSync(server.lockFile)).toBe(false)
    } finally {
      await server.dispose()
    }
  })

  it("the default BRAIN_MAX_REQUEST_BYTES (32 MiB) holds on every route: a 12 MiB Wasm module and a 12 MiB JSON body are accepted", async () => {
    const server = await startServer({ entry: "product" })
    try {
      const api = new Client(server)
      const wasm = padded(await helloLoop(), 12 * 1024 * 1024)
      const admitted = await api.req("/v1/agentloops", { raw: wasm, headers: { "content-type": "application/wasm" } })
      expect(admitted.status, admitted.text).toBe(201)
      expect(admitted.body.id).toBe(crypto.createHash("sha256").update(wasm).digest("hex"))
      const created = await api.create({ model: scripted(), system: "s".repeat(12 * 1024 * 1024) })
      expect(created.status, created.text.slice(0, 300)).toBe(201)
    } finally {
      await server.dispose()
    }
  })

  it("a turn's input above BRAIN_MAX_INPUT_BYTES (its UTF-8 JSON) is refused 413 by send and submit before anything is journaled (a keyed refusal replayed as any definite one is); an input of exactly the limit runs", async () => {
    const limit = 4096
    const server = await startServer({ entry: "product", env: { BRAIN_MAX_INPUT_BYTES: String(limit) } })
    try {
      const api = new Client(server)
      const id = await api.created()
      const before = (await api.get(id)).body.last_sequence
      // {"message":"…"} is 14 bytes around the text; "é" is two bytes of UTF-8.
      const fits = "é".repeat((limit - 14) / 2)
      const over = fits + "x"
      const key = { "Idempotency-Key": "big-one" }
      const refused = await api.send(id, over, key)
      expectError(refused, 413, "payload_too_large")
      expect(refused.body.message).toContain("BRAIN_MAX_INPUT_BYTES")
      expectError(await api.send(id, over), 413, "payload_too_large")
      expectError(await api.submit(id, over), 413, "payload_too_large")
      expect((await api.get(id)).body.last_sequence, "nothing was journaled").toBe(before)
      // docs/api.md, Idempotency: a definite refusal is replayed byte for byte.
      const replayed = await api.send(id, over, key)
      expect([replayed.status, replayed.text]).toEqual([refused.status, refused.text])
      const sent = await api.send(id, fits, { "Idempotency-Key": "fits" })
      expect(sent.status, sent.text.slice(0, 300)).toBe(200)
      expect(sent.body.turn.result).toEqual({ text: fits })
    } finally {
      await server.dispose()
    }
  })

  it("refuses to listen beyond loopback without a token: a non-zero exit that says why", async () => {
    const server = new ServerProcess({ entry: "product", env: { BRAIN_LISTEN: "0.0.0.0:0" } })
    try {
      const r = await server.spawn()
      expect(r.listening, server.output).toBe(false)
      if (!r.listening) expect(r.exited.code, server.output).not.toBe(0)
      expect(server.output).toMatch(/BRAIN_API_TOKEN/)
      expect(server.output).toMatch(/loopback/)
      // The flag form too.
      const flagged = new ServerProcess({ entry: "product", args: ["--listen", "0.0.0.0:0"], dataDir: server.dataDir })
      try {
        const f = await flagged.spawn()
        expect(f.listening, flagged.output).toBe(false)
        expect(flagged.output).toMatch(/BRAIN_API_TOKEN/)
      } finally {
        await flagged.dispose()
      }
    } finally {
      await server.dispose()
    }
  })
})

// ---------------------------------------------------------------------------------------------
// Restarts, kills and drains: a server each

describe("across restarts", () => {
  it("idempotent replays survive a graceful restart: create, send, submit and end answer the identical bytes on the same data directory", async () => {
    const server = await startServer()
    try {
      const api = new Client(server)
      const body = { model: scripted(), system: "restart" }
      const c = await api.create(body, { "idempotency-key": "c" })
      const id = c.body.session_id
      const s = await api.send(id, "one", { "idempotency-key": "s" })
      const a = await api.submit(id, "two", { "idempotency-key": "a" })
      expect(a.status).toBe(202)
      await api.waitFor(id, "turn_ended", a.body.sequence)
      const e = await api.end(id, { "idempotency-key": "e" })
      expect([c.status, s.status, e.status]).toEqual([201, 200, 200])
      const last = (await api.get(id)).body.last_sequence

      expect(await server.stop()).toEqual({ code: 0, signal: null })
      await server.restart()

      const c2 = await api.create(body, { "idempotency-key": "c" })
      expect([c2.status, c2.text]).toEqual([201, c.text])
      const s2 = await api.send(id, "one", { "idempotency-key": "s" })
      expect([s2.status, s2.text]).toEqual([200, s.text])
      const a2 = await api.submit(id, "two", { "idempotency-key": "a" })
      expect([a2.status, a2.text]).toEqual([202, a.text])
      expect(a2.headers.get("preference-applied")).toBe("respond-async")
      const e2 = await api.end(id, { "idempotency-key": "e" })
      expect([e2.status, e2.text]).toEqual([200, e.text])
      expectError(await api.send(id, "other", { "idempotency-key": "s" }), 409, "conflict")
      expect((await api.get(id)).body.last_sequence).toBe(last)
      expect((await api.req("/v1/sessions")).body.sessions.length).toBe(1)
    } finally {
      await server.dispose()
    }
  })

  it("kill -9 between claim and answer: the retry is 409 ambiguous and is not executed again; the journal holds one turn_started, failed as interrupted", async () => {
    const server = await startServer()
    try {
      const api = new Client(server)
      const id = await api.created({ model: slowModel(5_000), tools: SLOW_TOOLS })
      const inFlight = api.send(id, "pay once", { "idempotency-key": "once" }).then(
        (r) => `answered ${r.status}`,
        () => "lost"
      )
      await eventually("the slow tool to start", async () => (server.toolCalls().length > 0 ? true : undefined))
      await server.kill()
      expect(await inFlight).toBe("lost")
      await server.restart()

      const retry = await api.send(id, "pay once", { "idempotency-key": "once" })
      expectError(retry, 409, "ambiguous")
      expect(retry.body.retryable).toBe(false)
      expectError(await api.send(id, "pay once", { "idempotency-key": "once" }), 409, "ambiguous")
      // A different body under the key is still a conflict.
      expectError(await api.send(id, "pay twice", { "idempotency-key": "once" }), 409, "conflict")

      const { events } = await api.allEvents(id)
      expect(events.filter((e) => e.kind === "turn_started").length).toBe(1)
      expect(events.find((e) => e.kind === "turn_failed")?.data.failure.code).toBe("interrupted")
      expect(server.toolCalls().length).toBe(1)
    } finally {
      await server.dispose()
    }
  })

  it("kill -9 mid-turn, then restart: the first request (a GET of the session) sees the turn failed as interrupted; the session takes the next turn", async () => {
    const server = await startServer()
    try {
      const api = new Client(server)
      const id = await api.created({ model: slowModel(5_000, "after the crash"), tools: SLOW_TOOLS })
      const receipt = await api.submit(id, "crash during me")
      expect(receipt.status).toBe(202)
      await eventually("the slow tool to start", async () => (server.toolCalls().length > 0 ? true : undefined))
      const before = (await api.get(id)).body
      expect(before.status).toBe("running")
      expect(fs.existsSync(server.lockFile)).toBe(true)
      await server.kill()
      await server.restart()

      const after = await api.get(id)
      expect(after.status, after.text).toBe(200)
      expect(after.body.status).toBe("idle")
      expect(after.body.last_sequence).toBeGreaterThan(before.last_sequence)
      const { events } = await api.allEvents(id)
      const failed = events.find((e) => e.kind === "turn_failed")
      expect(failed, JSON.stringify(events.map((e) => e.kind))).toMatchObject({
        data: { sequence: receipt.body.sequence, failure: { code: "interrupted" } }
      })
      expect(events.some((e) => e.kind === "turn_ended")).toBe(false)
      expect(events.find((e) => e.kind === "tool_call_failed" || e.kind === "tool_call_ended")?.data).toMatchObject({ outcome: "unknown" })
      // Nothing was re-run, and the next message starts a new turn.
      expect(server.toolCalls().length).toBe(1)
      const next = await api.send(id, "again")
      expect(next.status, next.text).toBe(200)
      expect(next.body.turn).toMatchObject({ status: "ended", result: { text: "after the crash" } })
    } finally {
      await server.dispose()
    }
  })

  it("the drain is bounded: past BRAIN_DRAIN_DEADLINE_MS a turn that will not finish is interrupted, its stream is sent the turn's end before its stream_error, and the process still exits 0 (the product, a model that never answers)", async () => {
    const server = await startServer({ entry: "product", env: { BRAIN_DRAIN_DEADLINE_MS: "500", BRAIN_CANCEL_GRACE_MS: "500" } })
    try {
      const api = new Client(server)
      const id = await api.created({ model: scripted([{ text: "never", delay_ms: 600_000 }]) })
      const stream = await openSse(server.url(`/v1/sessions/${id}/events?after=0`))
      const inFlight = api.send(id, "forever").then((r) => r.status, () => 0)
      await stream.until("the model call to start", () => stream.frames.some((f) => f.event === "model_call_started"))
      const t0 = Date.now()
      server.signal("SIGTERM")
      const exit = await server.waitExit(6_000).catch((err: Error) => err.message.split("\n")[0])
      expect(exit, `${Date.now() - t0} ms after SIGTERM\n${server.output}`).toEqual({ code: 0, signal: null })
      expect(fs.existsSync(server.lockFile)).toBe(false)
      await stream.done
      expect(stream.frames.slice(-2).map((f) => f.event)).toEqual(["turn_failed", "stream_error"])
      await inFlight
      await server.restart()
      const { events } = await api.allEvents(id)
      expect(events.find((e) => e.kind === "turn_failed")?.data.failure.code).toBe("interrupted")
    } finally {
      await server.dispose()
    }
  })

  it("graceful drain: on SIGTERM new mutating requests get 503 overloaded, a second SIGTERM is ignored, the in-flight sync send completes 200, SSE streams end, the process exits 0 and the lock is gone", async () => {
    const server = await startServer()
    try {
      const api = new Client(server)
      // The drain's checks all run while this turn's tool does: long enough for a loaded machine.
      const busy = await api.created({ model: slowModel(8_000, "drained"), tools: SLOW_TOOLS })
      const idle = await api.created()
      const stream = await openSse(server.url(`/v1/sessions/${idle}/events?after=0`))
      await stream.until("the catch-up", () => stream.frames.length >= 2)
      const inFlight = api.send(busy, "finish me")
      await eventually("the slow tool to start", async () => (server.toolCalls().length > 0 ? true : undefined))

      server.signal("SIGTERM")
      const ready = await eventually("readiness to drop", async () => {
        const r = await api.req("/health/ready")
        return r.status === 503 ? r : undefined
      }, 4_000, 10)
      expectError(ready, 503, "overloaded")
      expect((await api.req("/health/live")).status).toBe(204)
      server.signal("SIGTERM") // repeated signals are ignored during the drain
      // (A cancel is taken during the drain: test/e2e/drainCancel.test.ts.)
      for (const r of [await api.create(), await api.send(idle, "x"), await api.submit(idle, "x"), await api.end(idle)]) {
        expectError(r, 503, "overloaded")
        expect(r.body.retryable).toBe(true)
      }
      expect(server.exited).toBeUndefined()

      const answered = await inFlight
      expect(answered.status, answered.text).toBe(200)
      expect(answered.body.turn).toMatchObject({ status: "ended", result: { text: "drained" } })
      // Once nothing is left to drain, well before the drain deadline (60 s).
      const exit = await server.waitExit(20_000)
      expect(exit, server.output).toEqual({ code: 0, signal: null })
      expect(fs.existsSync(server.lockFile)).toBe(false)
      await stream.done
      expect(stream.ended).toBeDefined()
      expect(server.toolCalls().length).toBe(1)
    } finally {
      await server.dispose()
    }
  })
})

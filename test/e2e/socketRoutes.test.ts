/**
 * Requests taken at the socket (src/http/SocketRoutes.ts: sends, a host's results), against a real
 * server process: each is answered as the gate and HttpApi answer the same request, every refusal
 * included, and a send's body is held in the body budget as the gate holds one. The comparison is
 * with the same request sent `Transfer-Encoding: chunked`, which the listener never takes (it
 * takes only a declared length), so the platform's handler, the gate and HttpApi answer it.
 */
import * as http from "node:http"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { framesOfResponse } from "../support/hosts.js"
import { ensureBuilt, eventually, request, type ServerProcess, startServer } from "../support/server.js"

interface Answer {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly body: string
}

/** POSTs `body` to `path` with a declared length, or chunked (no length: the listener passes it on). */
const post = (baseUrl: string, path: string, body: Buffer | string, options: { chunked: boolean; headers?: Record<string, string> }) =>
  new Promise<Answer>((resolve, reject) => {
    const bytes = typeof body === "string" ? Buffer.from(body) : body
    const req = http.request(`${baseUrl}${path}`, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        ...(options.chunked ? { "transfer-encoding": "chunked" } : { "content-length": String(bytes.length) }),
        ...options.headers
      }
    })
    req.on("response", (res) => {
      let text = ""
      res.setEncoding("utf8")
      res.on("data", (d: string) => void (text += d))
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: text }))
    })
    req.on("error", reject)
    if (options.chunked && bytes.length > 1) {
      req.write(bytes.subarray(0, 1))
      req.end(bytes.subarray(1))
    } else req.end(bytes)
  })

/** What of an answer a client may rely on: the status, the media type and the JSON body (sequences, which move on each turn, aside). */
const shape = (a: Answer) => {
  const parsed = a.body === "" ? undefined : (JSON.parse(a.body) as Record<string, any>)
  return {
    status: a.status,
    type: a.headers["content-type"],
    body: parsed?.turn !== undefined
      ? { ...parsed, last_sequence: typeof parsed.last_sequence, turn: { ...parsed.turn, sequence: typeof parsed.turn.sequence } }
      : parsed
  }
}

describe("requests taken at the socket", () => {
  let server: ServerProcess
  let session: string
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_INFLIGHT_BODY_BYTES: "1000000", BRAIN_MAX_REQUEST_BYTES: "4000000" } })
    const created = await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(created.status).toBe(201)
    session = (created.body as { session_id: string }).session_id
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a send the listener answers is answered as the gate and HttpApi answer it: the outcome, with and without a key", async () => {
    const path = `/v1/sessions/${session}/messages`
    const body = JSON.stringify({ input: { message: "hello" } })
    const taken = await post(server.baseUrl, path, body, { chunked: false })
    const passed = await post(server.baseUrl, path, body, { chunked: true })
    expect(taken.status, taken.body).toBe(200)
    expect(shape(taken)).toEqual(shape(passed))
    // A key's replay answers the recorded outcome, byte for byte, on either path.
    const keyed = { "idempotency-key": `k-${Date.now()}` }
    const first = await post(server.baseUrl, path, body, { chunked: false, headers: keyed })
    const again = await post(server.baseUrl, path, body, { chunked: true, headers: keyed })
    const thrice = await post(server.baseUrl, path, body, { chunked: false, headers: keyed })
    expect(first.status).toBe(200)
    expect(again.body).toBe(first.body)
    expect(thrice.body).toBe(first.body)
  })

  it("every send the route does not take as it is gets the answer the gate and HttpApi give the same request, and the session is unchanged", async () => {
    const path = `/v1/sessions/${session}/messages`
    const deep = `{"input":{"message":"x","media":${"[".repeat(70)}${"]".repeat(70)}}}`
    const cases: ReadonlyArray<readonly [string, string, Buffer | string]> = [
      ["malformed JSON", path, '{"input": {"message": "hi"'],
      ["not UTF-8", path, Buffer.from([0x7b, 0x22, 0x69, 0x6e, 0x70, 0x75, 0x74, 0x22, 0x3a, 0xff, 0xfe, 0x7d])],
      ["nested too deep", path, deep],
      ["an unknown field", path, JSON.stringify({ input: { message: "hi" }, extra: 1 })],
      ["a message of the wrong type", path, JSON.stringify({ input: { message: 42 } })],
      ["not an object", path, "[1,2,3]"],
      ["an unknown session", "/v1/sessions/no-such-session/messages", JSON.stringify({ input: { message: "hi" } })],
      ["a malformed session id", "/v1/sessions/%ZZ/messages", JSON.stringify({ input: { message: "hi" } })]
    ]
    const before = await request(server.baseUrl, `/v1/sessions/${session}`)
    for (const [what, p, body] of cases) {
      const taken = await post(server.baseUrl, p, body, { chunked: false })
      const passed = await post(server.baseUrl, p, body, { chunked: true })
      expect(taken.status, what).toBeGreaterThanOrEqual(400)
      expect(taken.status, what).toBeLessThan(500)
      expect(shape(taken), what).toEqual(shape(passed))
    }
    const after = await request(server.baseUrl, `/v1/sessions/${session}`)
    expect(after.body).toEqual(before.body)
  })

  it("a send's body is held in the body budget while it arrives, and given back when its client goes away: the next body is served", async () => {
    const path = `/v1/sessions/${session}/messages`
    const body = JSON.stringify({ input: { message: "s".repeat(800_000) } })
    const gone = http.request(`${server.baseUrl}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)) }
    })
    gone.on("error", () => {})
    gone.write(body.slice(0, 400_000))
    const refused = await eventually("a second body to be refused", async () => {
      const r = await post(server.baseUrl, path, body, { chunked: false })
      return r.status === 503 ? r : undefined
    })
    expect(JSON.parse(refused.body)).toMatchObject({ code: "overloaded", retryable: true })
    gone.destroy()
    const served = await eventually("the held bytes to be given back", async () => {
      const r = await post(server.baseUrl, path, body, { chunked: false })
      return r.status !== 503 ? r : undefined
    })
    expect(served.status, served.body.slice(0, 200)).toBe(200)
  }, 30_000)

  it("a host's results are answered as the gate and HttpApi answer them: 204 for a call in flight; a wrong token, a malformed body, a wrong shape, a call not in flight refused alike", async () => {
    const registered = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
    expect(registered.status).toBe(201)
    const host = registered.body as { host_id: string; token: string }
    const controller = new AbortController()
    const stream = await fetch(`${server.baseUrl}/v1/hosts/${host.host_id}/commands`, {
      headers: { authorization: `Bearer ${host.token}`, accept: "text/event-stream" },
      signal: controller.signal
    })
    const frames = framesOfResponse(stream)
    await frames.expect("ready")
    const created = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies: [{ tool_calls: [{ name: "lookup", input: {} }] }, { tool_calls: [{ name: "lookup", input: {} }] }, { text: "done" }] },
        environments: [{ name: "app", driver: "host", host: host.host_id }],
        tools: [{ name: "lookup", description: "looks up", environment: "app" }]
      }
    })
    expect(created.status, created.text).toBe(201)
    const id = (created.body as { session_id: string }).session_id
    const turn = request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
    const path = `/v1/hosts/${host.host_id}/results`
    const auth = { authorization: `Bearer ${host.token}` }
    const first = (await frames.expect("call")).data
    const refusals: ReadonlyArray<readonly [string, string, Record<string, string>]> = [
      ["a wrong token", JSON.stringify({ session_id: first.session_id, sequence: first.sequence, ok: 1 }), { authorization: "Bearer bht_nope" }],
      ["malformed JSON", '{"session_id":', auth],
      ["a wrong shape", JSON.stringify({ session_id: first.session_id, sequence: "x", ok: 1 }), auth],
      ["a call not in flight", JSON.stringify({ session_id: first.session_id, sequence: first.sequence + 1000, ok: 1 }), auth]
    ]
    for (const [what, body, headers] of refusals) {
      const taken = await post(server.baseUrl, path, body, { chunked: false, headers })
      const passed = await post(server.baseUrl, path, body, { chunked: true, headers })
      expect(taken.status, what).toBeGreaterThanOrEqual(400)
      expect(shape(taken), what).toEqual(shape(passed))
    }
    // The first call's result taken at the socket, the second's through the platform: the same answer.
    const taken = await post(server.baseUrl, path, JSON.stringify({ session_id: first.session_id, sequence: first.sequence, ok: { n: 1 } }), { chunked: false, headers: auth })
    const second = (await frames.expect("call")).data
    const passed = await post(server.baseUrl, path, JSON.stringify({ results: [{ session_id: second.session_id, sequence: second.sequence, ok: { n: 2 } }] }), { chunked: true, headers: auth })
    expect(taken.status).toBe(204)
    expect(shape(taken)).toEqual(shape(passed))
    expect(taken.headers["content-length"] ?? "0").toBe(passed.headers["content-length"] ?? "0")
    const outcome = await turn
    expect(outcome.status, outcome.text).toBe(200)
    controller.abort()
  })
})

/**
 * The HTTP transport's refusals and codings, on a real server process and raw sockets
 * (docs/operations.md, "Connections"; docs/api.md, "Errors"):
 *
 * - what Node would refuse in its own words (no Host, an unknown Expect, CONNECT) is refused in
 *   Brain's error body;
 * - `Expect: 100-continue` is answered before `100 Continue` when the request is refused as it
 *   stands (a declared length over the limit), so the body is never sent;
 * - a body in a coding Brain does not read (`Content-Encoding: gzip`, `Transfer-Encoding: gzip,
 *   chunked`) and a repeated `Idempotency-Key` are refused, and nothing runs;
 * - a client that half-closes after its request still gets the answer;
 * - headers are bounded by their size (16 KiB), not silently cut at a count.
 */
import { describe, expect, it } from "@effect/vitest"
import { request, sharedServer } from "../support/server.js"
import { connect, exchange, expectBrainError, json, portOf } from "../support/wire.js"

const MAX_REQUEST_BYTES = 65_536

describe("refusals in Brain's body, codings, repeated keys, half-closed clients", () => {
  const server = sharedServer({ env: { BRAIN_MAX_REQUEST_BYTES: String(MAX_REQUEST_BYTES) } })
  const port = () => portOf(server())
  const created = async () => {
    const r = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }
  const sessionCount = async () => (await request(server().baseUrl, "/v1/sessions?limit=1000")).body.sessions.length as number
  const lastSequence = async (id: string) => (await request(server().baseUrl, `/v1/sessions/${id}`)).body.last_sequence as number

  it("an HTTP/1.1 request without a Host header is refused 400 invalid_request in Brain's body; an HTTP/1.0 one needs none", async () => {
    const [missing] = await exchange(port(), "GET /v1/sessions HTTP/1.1\r\n\r\n")
    expectBrainError(missing, 400, "invalid_request")
    expect(missing!.body.message).toMatch(/Host/)
    const [old] = await exchange(port(), "GET /health/live HTTP/1.0\r\n\r\n")
    expect(old?.status).toBe(204)
    // A send without Host is refused too (the route taken at the socket passes it to the gate), and runs nothing.
    const id = await created()
    const before = await lastSequence(id)
    const [send] = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }).replace("host: brain\r\n", ""))
    expectBrainError(send, 400, "invalid_request")
    expect(await lastSequence(id)).toBe(before)
  })

  it("an Expect other than 100-continue is refused 417 in Brain's body, and nothing is created", async () => {
    const before = await sessionCount()
    const [answer] = await exchange(port(), json("POST", "/v1/sessions", { model: { provider: "scripted" } }, { expect: "foo" }))
    expect(answer?.status, answer?.head).toBe(417)
    expect(answer!.body).toMatchObject({ code: "invalid_request", retryable: false })
    expect(answer!.body.message).toMatch(/100-continue/)
    expect(await sessionCount()).toBe(before)
  })

  it("CONNECT is answered 405 method_not_allowed in Brain's body, not a connection closed in silence", async () => {
    const [answer] = await exchange(port(), "CONNECT example.com:443 HTTP/1.1\r\nhost: example.com:443\r\n\r\n")
    expectBrainError(answer, 405, "method_not_allowed")
  })

  it("Expect: 100-continue with a Content-Length over BRAIN_MAX_REQUEST_BYTES is refused 413 before any 100 Continue, and the connection closed; within the limit the client gets 100 Continue and then its answer", async () => {
    for (const [path, type] of [["/v1/sessions", "application/json"], ["/v1/agentloops", "application/wasm"]] as const) {
      const wire = await connect(port())
      wire.socket.write(`POST ${path} HTTP/1.1\r\nhost: brain\r\ncontent-type: ${type}\r\ncontent-length: ${MAX_REQUEST_BYTES + 1}\r\nexpect: 100-continue\r\n\r\n`)
      await wire.until("the refusal", () => wire.responses().length > 0)
      const [first] = wire.responses()
      expectBrainError(first, 413, "payload_too_large")
      expect(first!.headers["connection"]).toBe("close")
      await wire.until("the connection to close", () => wire.ended)
      expect(wire.received().toString("latin1")).not.toContain("100 Continue")
      wire.socket.destroy()
    }
    const body = JSON.stringify({ model: { provider: "scripted" } })
    const wire = await connect(port())
    wire.socket.write(`POST /v1/sessions HTTP/1.1\r\nhost: brain\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`)
    await wire.until("100 Continue", () => wire.responses().length > 0)
    expect(wire.responses()[0]!.status).toBe(100)
    wire.socket.write(body)
    await wire.until("the answer", () => wire.responses().length > 1)
    expect(wire.responses()[1]!.status, wire.responses()[1]!.text).toBe(201)
    wire.socket.destroy()
  })

  it("a body with a Content-Encoding other than identity is refused 415, and nothing is created or run, whether or not the route is taken at the socket", async () => {
    const before = await sessionCount()
    const [create] = await exchange(port(), json("POST", "/v1/sessions", { model: { provider: "scripted" } }, { "content-encoding": "gzip" }))
    expectBrainError(create, 415, "unsupported_media_type")
    expect(create!.body.message).toMatch(/Content-Encoding/)
    expect(await sessionCount()).toBe(before)
    const [identity] = await exchange(port(), json("POST", "/v1/sessions", { model: { provider: "scripted" } }, { "content-encoding": "identity" }))
    expect(identity?.status, identity?.text).toBe(201)
    const id = await created()
    const sequence = await lastSequence(id)
    const [send] = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }, { "content-encoding": "gzip" }))
    expectBrainError(send, 415, "unsupported_media_type")
    expect(await lastSequence(id)).toBe(sequence)
  })

  it("a body in a transfer coding other than chunked (Transfer-Encoding: gzip, chunked) is refused 400 invalid_request, and no turn runs", async () => {
    const id = await created()
    const sequence = await lastSequence(id)
    const text = JSON.stringify({ input: { message: "hi" } })
    const [send] = await exchange(
      port(),
      `POST /v1/sessions/${id}/messages HTTP/1.1\r\nhost: brain\r\ncontent-type: application/json\r\ntransfer-encoding: gzip, chunked\r\n\r\n${text.length.toString(16)}\r\n${text}\r\n0\r\n\r\n`
    )
    expectBrainError(send, 400, "invalid_request")
    expect(send!.body.message).toMatch(/Transfer-Encoding/)
    expect(await lastSequence(id)).toBe(sequence)
  })

  it("two Idempotency-Key headers are refused 400 invalid_request, on a create and on a send, and nothing runs; one key holding a comma is one key", async () => {
    const before = await sessionCount()
    const twice = "idempotency-key: a\r\nidempotency-key: b\r\n"
    const [create] = await exchange(port(), json("POST", "/v1/sessions", { model: { provider: "scripted" } }).replace("host: brain\r\n", `host: brain\r\n${twice}`))
    expectBrainError(create, 400, "invalid_request")
    expect(create!.body.details).toEqual([{ path: ["idempotency-key"], message: expect.stringMatching(/more than once/) }])
    expect(await sessionCount()).toBe(before)
    const id = await created()
    const sequence = await lastSequence(id)
    const [send] = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }).replace("host: brain\r\n", `host: brain\r\n${twice}`))
    expectBrainError(send, 400, "invalid_request")
    expect(await lastSequence(id)).toBe(sequence)
    const [comma] = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }, { "idempotency-key": "a, b" }))
    expect(comma?.status, comma?.text).toBe(200)
  })

  it("a client that half-closes its side after a sync send and a pipelined health check still gets both answers, then the connection closes", async () => {
    const id = await created()
    const wire = await connect(port(), { allowHalfOpen: true })
    wire.socket.write(json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }) + "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
    wire.socket.end()
    await wire.until("both answers and the close", () => wire.ended && wire.responses().length >= 2)
    const [send, health] = wire.responses()
    expect(send?.status, send?.text).toBe(200)
    expect(send!.body.turn.status).toBe("ended")
    expect(health?.status).toBe(204)
  })

  it("a request that ran gets its own answer first even when bytes Node cannot parse follow it: a DELETE with an unframed body is answered 204, a keyed sync send followed by junk 200; the junk's 400 comes only after, then the connection closes", async () => {
    // Node frames no body on a DELETE it sends: `{}` follows the request as if it were the next one.
    const ended = await created()
    expect((await request(server().baseUrl, `/v1/sessions/${ended}/end`, { method: "POST" })).status).toBe(200)
    const deletion = await connect(port())
    deletion.socket.write(`DELETE /v1/sessions/${ended} HTTP/1.1\r\nhost: brain\r\ncontent-type: application/json\r\n\r\n{}`)
    await deletion.until("the answer and the close", () => deletion.ended && deletion.responses().length > 0)
    const [deleted, junk] = deletion.responses()
    expect(deleted?.status, deletion.received().toString("latin1")).toBe(204)
    if (junk !== undefined) expectBrainError(junk, 400, "invalid_request")
    expect((await request(server().baseUrl, `/v1/sessions/${ended}`)).status).toBe(404)
    // The turn is still running when the junk arrives: its answer is pending on the connection.
    const r = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted", replies: [{ text: "done", delay_ms: 300 }] } } })
    const id = r.body.session_id as string
    const send = await connect(port())
    send.socket.write(json("POST", `/v1/sessions/${id}/messages`, { input: { message: "hi" } }, { "idempotency-key": "junk-after" }) + "GARBAGE\r\n\r\n")
    await send.until("the answer and the close", () => send.ended && send.responses().length > 0)
    const [outcome, refusal] = send.responses()
    expect(outcome?.status, send.received().toString("latin1")).toBe(200)
    expect(outcome!.body.turn).toMatchObject({ status: "ended", result: { text: "done" } })
    if (refusal !== undefined) expectBrainError(refusal, 400, "invalid_request")
    // Junk that breaks the body of the request being read is that request's answer, at once (not a 408 later).
    const before = await lastSequence(id)
    const chunked = await connect(port())
    chunked.socket.write(`POST /v1/sessions/${id}/messages HTTP/1.1\r\nhost: brain\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\nZZ\r\n{}\r\n`)
    await chunked.until("the refusal", () => chunked.responses().length > 0, 5_000)
    expectBrainError(chunked.responses()[0], 400, "invalid_request")
    chunked.socket.destroy()
    expect(await lastSequence(id)).toBe(before)
  })

  it("bytes Node cannot parse after an SSE request never land inside the stream: it goes on carrying the session's Events and ends after session_ended", async () => {
    const id = await created()
    const wire = await connect(port())
    wire.socket.write(`GET /v1/sessions/${id}/events HTTP/1.1\r\nhost: brain\r\naccept: text/event-stream\r\n\r\nGARBAGE\r\n\r\n`)
    await wire.until("the stream's head", () => wire.received().includes("\r\n\r\n"))
    expect(wire.received().toString("latin1")).toMatch(/^HTTP\/1\.1 200 /)
    expect((await request(server().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })).status).toBe(200)
    expect((await request(server().baseUrl, `/v1/sessions/${id}/end`, { method: "POST" })).status).toBe(200)
    await wire.until("the stream's end", () => wire.received().includes("event: session_ended"))
    const text = wire.received().toString("latin1")
    const streamEnd = text.indexOf("event: session_ended")
    expect(text.slice(0, streamEnd)).not.toContain("HTTP/1.1 400")
    expect(text.slice(0, streamEnd)).toContain("event: turn_ended")
    wire.socket.destroy()
  })

  it("headers are bounded by their size (16 KiB), not cut at a count: a create whose Content-Type follows 2,100 other headers is read whole; 17 KiB of headers is 431 in Brain's body", async () => {
    const many = "x: 1\r\n".repeat(2_100)
    const [read] = await exchange(port(), json("POST", "/v1/sessions", { model: { provider: "scripted" } }).replace("host: brain\r\n", `host: brain\r\n${many}`))
    expect(read?.status, read?.text).toBe(201)
    const [tooLarge] = await exchange(port(), `GET /health/live HTTP/1.1\r\nhost: brain\r\nx: ${"a".repeat(17 * 1024)}\r\n\r\n`)
    expectBrainError(tooLarge, 431, "invalid_request")
  })
})

/**
 * The edges of DESIGN §7's request rules on a real server process: the `Idempotency-Key` check on
 * the host routes (which never deduplicate), empty bodies on the routes that take no payload (a
 * plain `curl -X POST … -d ''`), the choice between an Events page and SSE by the `Accept`
 * header's quality values, and what a key answers while its request is in progress and across
 * sessions (docs/api.md, Idempotency).
 */
import * as http from "node:http"
import { describe, expect, it } from "@effect/vitest"
import { eventually, type Reply, request, type RequestOptions, sharedServer } from "../support/server.js"

const TOO_LONG_KEY = "k".repeat(257)
const slowModel = (ms: number, text: string) => ({
  provider: "scripted",
  replies: [{ tool_calls: [{ name: "slow", input: { ms } }] }, { text }]
})

interface RawReply {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  readonly text: string
  readonly body: any
}

/** A request over node:http, whose headers (an empty one included) and body chunks are sent exactly as given. */
const rawRequest = (
  baseUrl: string,
  options: { method: string; path: string; headers?: Record<string, string>; chunks?: ReadonlyArray<string> }
) =>
  new Promise<RawReply>((resolve, reject) => {
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
        resolve({ status: res.statusCode ?? 0, headers: res.headers, text, body })
      })
    })
    req.on("error", reject)
    for (const c of options.chunks ?? []) req.write(c)
    req.end()
  })

const expectInvalid = (r: RawReply | Reply, what: string) => {
  expect(r.status, `${what}: ${r.text}`).toBe(400)
  expect(r.body?.code, what).toBe("invalid_request")
}

describe("request edges against a running server", () => {
  const server = sharedServer()

  const call = (p: string, options: RequestOptions = {}) => request(server().baseUrl, p, options)
  const raw = (options: Parameters<typeof rawRequest>[1]) => rawRequest(server().baseUrl, options)
  const created = async (body: unknown = { model: { provider: "scripted" } }): Promise<string> => {
    const r = await call("/v1/sessions", { json: body })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id
  }

  describe("the Idempotency-Key on the host routes", () => {
    it("POST /v1/hosts refuses an empty or over-256-byte Idempotency-Key with 400 invalid_request; a valid key is accepted and ignored (each registration is a new host)", async () => {
      expectInvalid(await raw({ method: "POST", path: "/v1/hosts", headers: { "idempotency-key": "" } }), "an empty key")
      expectInvalid(await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": TOO_LONG_KEY } }), "a key of 257 bytes")
      expectInvalid(await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": "é".repeat(129) } }), "a key of 258 UTF-8 bytes")
      const first = await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": "register-once" } })
      const second = await call("/v1/hosts", { method: "POST", headers: { "idempotency-key": "register-once" } })
      expect([first.status, second.status], `${first.text} ${second.text}`).toEqual([201, 201])
      expect(second.body.host_id).not.toBe(first.body.host_id)
      expect(second.body.token).not.toBe(first.body.token)
    })

    it("a host's results and Events refuse an empty or over-256-byte Idempotency-Key with 400 before anything is taken, whether the results are taken at the socket or by the router; a valid key changes nothing", async () => {
      const host = (await call("/v1/hosts", { method: "POST" })).body as { host_id: string; token: string }
      const id = await created()
      const result = JSON.stringify({ session_id: id, sequence: 1, ok: { done: true } })
      const event = JSON.stringify({ session_id: id, sequence: 1, kind: "progress", payload: {} })
      const auth = { authorization: `Bearer ${host.token}`, "content-type": "application/json" }
      for (const [route, body] of [["results", result], ["events", event]] as const) {
        const path = `/v1/hosts/${host.host_id}/${route}`
        for (const [what, key] of [["an empty key", ""], ["a key of 257 bytes", TOO_LONG_KEY]] as const) {
          // With a content-length (taken at the socket, for results) and chunked (through the router).
          const sized = await raw({ method: "POST", path, headers: { ...auth, "content-length": String(Buffer.byteLength(body)), "idempotency-key": key }, chunks: [body] })
          expectInvalid(sized, `${route}, ${what}, sized`)
          const chunked = await raw({ method: "POST", path, headers: { ...auth, "idempotency-key": key }, chunks: [body.slice(0, 5), body.slice(5)] })
          expectInvalid(chunked, `${route}, ${what}, chunked`)
        }
        // A valid key is ignored: the call named is not in flight, as without a key.
        const keyed = await raw({ method: "POST", path, headers: { ...auth, "idempotency-key": "host-key" }, chunks: [body] })
        expect(keyed.status, keyed.text).toBe(409)
        expect(keyed.body.code).toBe("conflict")
      }
      // Nothing reached the session's journal.
      const page = await call(`/v1/sessions/${id}/events?after=0`)
      expect(page.body.events.map((e: { kind: string }) => e.kind)).toEqual(["session_creation_started", "session_creation_ended"])
    })
  })

  describe("empty bodies on the routes that take no payload", () => {
    it("cancel, end, delete and host registration take an empty body whatever its content-type (curl -X POST -d ''); a non-empty body of another type is still 415, and a route with a payload still refuses a non-JSON type", async () => {
      const form = { "content-type": "application/x-www-form-urlencoded" }
      const id = await created()
      const cancelled = await raw({ method: "POST", path: `/v1/sessions/${id}/cancel`, headers: { ...form, "content-length": "0" } })
      expect(cancelled.status, cancelled.text).toBe(200)
      expect(cancelled.body).toMatchObject({ session_id: id, status: "idle" })
      const noLength = await raw({ method: "POST", path: `/v1/sessions/${id}/cancel`, headers: { "content-type": "text/plain" } })
      expect(noLength.status, noLength.text).toBe(200)

      const formBody = await raw({ method: "POST", path: `/v1/sessions/${id}/cancel`, headers: form, chunks: ["a=1"] })
      expect(formBody.status, formBody.text).toBe(415)
      expect(formBody.body.code).toBe("unsupported_media_type")
      const textObject = await raw({ method: "POST", path: `/v1/sessions/${id}/cancel`, headers: { "content-type": "text/plain" }, chunks: ["{}"] })
      expect(textObject.status, textObject.text).toBe(415)

      const ended = await raw({ method: "POST", path: `/v1/sessions/${id}/end`, headers: { ...form, "content-length": "0" } })
      expect(ended.status, ended.text).toBe(200)
      expect(ended.body).toMatchObject({ session_id: id, status: "ended" })
      const deleted = await raw({ method: "DELETE", path: `/v1/sessions/${id}`, headers: { ...form, "content-length": "0" } })
      expect(deleted.status, deleted.text).toBe(204)
      expect((await call(`/v1/sessions/${id}`)).status).toBe(404)

      const registered = await raw({ method: "POST", path: "/v1/hosts", headers: { ...form, "content-length": "0" } })
      expect(registered.status, registered.text).toBe(201)

      const create = await raw({ method: "POST", path: "/v1/sessions", headers: { ...form, "content-length": "0" } })
      expect(create.status, create.text).toBe(415)
      expect(create.body.code).toBe("unsupported_media_type")
    })
  })

  describe("`{}` on the routes that take no payload", () => {
    it("every route that takes no payload takes the JSON `{}` as no body; any other JSON (a field, an array, null) is 400 invalid_request and changes nothing", async () => {
      const id = await created()
      const host = (await call("/v1/hosts", { method: "POST", json: {} })).body as { host_id: string; token: string }
      expect(host.host_id).toBeDefined()
      const asHost = { authorization: `Bearer ${host.token}` }
      for (const other of ['{"x":1}', "[]", "null"]) {
        for (const [method, p, headers] of [
          ["POST", `/v1/sessions/${id}/cancel`, {}],
          ["POST", `/v1/sessions/${id}/end`, {}],
          ["DELETE", `/v1/sessions/${id}`, {}],
          ["DELETE", `/v1/agentloops/${"0".repeat(64)}`, {}],
          ["POST", "/v1/hosts", {}],
          ["DELETE", `/v1/hosts/${host.host_id}`, asHost]
        ] as const) {
          const refused = await call(p, { method, raw: other, headers: { ...headers, "content-type": "application/json" } })
          expect(refused.status, `${method} ${p} ${other}: ${refused.text}`).toBe(400)
          expect(refused.body.code).toBe("invalid_request")
        }
      }
      expect((await call(`/v1/sessions/${id}`)).body.status).toBe("idle")
      const empty = (method: string, p: string, headers: Record<string, string> = {}) =>
        call(p, { method, raw: " {} ", headers: { ...headers, "content-type": "application/json" } })
      expect((await empty("POST", `/v1/sessions/${id}/cancel`)).status).toBe(200)
      expect((await empty("POST", `/v1/sessions/${id}/end`)).body).toMatchObject({ status: "ended" })
      expect((await empty("DELETE", `/v1/sessions/${id}`)).status).toBe(204)
      expect((await empty("DELETE", `/v1/agentloops/${"0".repeat(64)}`)).status).toBe(404)
      expect((await empty("POST", "/v1/hosts")).status).toBe(201)
      expect((await empty("DELETE", `/v1/hosts/${host.host_id}`, asHost)).status).toBe(204)
    })

    it("an empty object with blanks inside (`{ }`, `{\\n}`, as a pretty-printing client writes `{}`) is no body too, on cancel, end and delete", async () => {
      const id = await created()
      const spaced = (method: string, p: string, raw: string) => call(p, { method, raw, headers: { "content-type": "application/json" } })
      expect((await spaced("POST", `/v1/sessions/${id}/cancel`, "{ }")).status).toBe(200)
      expect((await spaced("POST", `/v1/sessions/${id}/end`, "{\n}")).body).toMatchObject({ status: "ended" })
      expect((await spaced("DELETE", `/v1/sessions/${id}`, " {\r\n\t} ")).status).toBe(204)
    })
  })

  describe("an unknown path", () => {
    it("is 404 not_found whatever its body's media type: a mistyped path is never reported as a 415", async () => {
      for (const [method, p] of [["POST", "/v1/session"], ["POST", "/nope"], ["POST", "/v1/sessions/x/y/z"], ["DELETE", "/nope"]] as const) {
        for (const type of ["application/x-www-form-urlencoded", "text/plain", "application/json"]) {
          const r = await call(p, { method, raw: "{}", headers: { "content-type": type } })
          expect(r.status, `${method} ${p} ${type}: ${r.text}`).toBe(404)
          expect(r.body.code).toBe("not_found")
        }
      }
    })
  })

  describe("an Events page or SSE, by the Accept header", () => {
    /** What the Events route answers for `accept`: "sse" or "page" (by the response's content type). */
    const answerFor = async (id: string, accept: string | undefined): Promise<"sse" | "page"> => {
      const controller = new AbortController()
      const response = await fetch(server().url(`/v1/sessions/${id}/events?after=0`), {
        headers: accept === undefined ? {} : { accept },
        signal: controller.signal
      })
      expect(response.status).toBe(200)
      const type = response.headers.get("content-type") ?? ""
      controller.abort()
      await response.body?.cancel().catch(() => undefined)
      if (type.startsWith("text/event-stream")) return "sse"
      expect(type).toMatch(/^application\/json/)
      return "page"
    }

    it("SSE is chosen only when text/event-stream has q > 0 and is preferred to application/json; q=0, a lower q, a tie and no Accept get the page", async () => {
      const id = await created()
      const cases: ReadonlyArray<readonly [string | undefined, "sse" | "page"]> = [
        [undefined, "page"],
        ["text/event-stream", "sse"],
        ["TEXT/Event-Stream; charset=utf-8", "sse"],
        ["text/event-stream;q=0", "page"],
        ["text/event-stream; q=0.0, application/json", "page"],
        ["application/json;q=0", "page"],
        ["text/event-stream;q=0.5, application/json", "page"],
        ["application/json;q=0.5, text/event-stream", "sse"],
        ["application/json, text/event-stream", "page"],
        ["text/event-stream, */*", "sse"],
        ["text/event-stream;q=0.9, */*;q=0.1", "sse"],
        ["*/*", "page"],
        ["application/json", "page"],
        ["text/event-stream;q=2", "page"]
      ]
      const seen: Array<readonly [string | undefined, "sse" | "page"]> = []
      for (const [accept] of cases) seen.push([accept, await answerFor(id, accept)])
      expect(seen).toEqual(cases)
    })
  })

  describe("Idempotency-Key answers", () => {
    it("a key whose request is still in progress is 409 ambiguous, retryable, telling the caller to retry with the same key; that retry then gets the first request's answer", async () => {
      const id = await created({ model: slowModel(1_500, "once"), tools: [{ name: "slow" }] })
      const key = { "idempotency-key": "in-progress" }
      const first = call(`/v1/sessions/${id}/messages`, { json: { input: { message: "go" } }, headers: key })
      await eventually("the slow tool to start", async () => (server().toolCalls().some((c) => c.session === id) ? true : undefined))
      const early = await call(`/v1/sessions/${id}/messages`, { json: { input: { message: "go" } }, headers: key })
      expect(early.status, early.text).toBe(409)
      expect(early.body).toMatchObject({ code: "ambiguous", retryable: true, details: { ambiguous: true, in_flight: true } })
      expect(early.body.message).toMatch(/same key/)
      expect(early.body.message).toMatch(/new key/)
      const answered = await first
      expect(answered.status, answered.text).toBe(200)
      const retry = await eventually("the recorded answer", async () => {
        const r = await call(`/v1/sessions/${id}/messages`, { json: { input: { message: "go" } }, headers: key })
        return r.status === 409 && r.body.retryable === true ? undefined : r
      }, 5_000, 50)
      expect([retry.status, retry.text]).toEqual([200, answered.text])
      expect(server().toolCalls().filter((c) => c.session === id).length).toBe(1)
    })

    it("cancel, end and delete are scoped per session: the same key on two sessions runs both requests", async () => {
      const [a, b] = [await created(), await created()]
      const key = { "idempotency-key": "same-key-two-sessions" }
      for (const route of ["cancel", "end"] as const) {
        const [ra, rb] = [await call(`/v1/sessions/${a}/${route}`, { method: "POST", headers: key }), await call(`/v1/sessions/${b}/${route}`, { method: "POST", headers: key })]
        expect([ra.status, rb.status], `${route}: ${ra.text} ${rb.text}`).toEqual([200, 200])
        expect([ra.body.session_id, rb.body.session_id]).toEqual([a, b])
      }
      const [da, db] = [await call(`/v1/sessions/${a}`, { method: "DELETE", headers: key }), await call(`/v1/sessions/${b}`, { method: "DELETE", headers: key })]
      expect([da.status, db.status]).toEqual([204, 204])
      expect([(await call(`/v1/sessions/${a}`)).status, (await call(`/v1/sessions/${b}`)).status]).toEqual([404, 404])
    })
  })
})

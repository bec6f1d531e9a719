/**
 * Which requests the listener for the routes taken at the socket (src/http/SocketRoutes.ts)
 * answers itself and which it passes to the platform's handler, unread or with the body it read;
 * and that a request's bytes are taken from the body budget as they arrive (never by the length it
 * declares) and held until its answer or its client's going away. On a real `node:http` server, with the platform's handler a
 * spy and the send route over a stand-in for Sessions.
 */
import * as http from "node:http"
import type { AddressInfo } from "node:net"
import { afterEach, describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Runtime } from "effect"
import { BodyBudget } from "../../src/http/BodyBudget.js"
import { preRead } from "../../src/http/BodyRead.js"
import { hostResultsRoute, sends, socketListener } from "../../src/http/SocketRoutes.js"
import type { HostsShape } from "../../src/services/Hosts.js"
import type { IdempotencyShape } from "../../src/services/Idempotency.js"
import type { SessionsShape } from "../../src/services/Sessions.js"

const ID = "ses_01jdq0000000000000000000ab"
const PATH = `/v1/sessions/${ID}/messages`

interface Passed {
  readonly url: string
  /** The body the platform read from the socket, or undefined when it came read already. */
  readonly streamed: string | undefined
  readonly preRead: string | undefined
  /** Bytes of the budget held when the request reached the platform. */
  readonly held: number
}

const servers: Array<http.Server> = []
afterEach(() => {
  for (const s of servers.splice(0)) s.close()
})

/** A server whose sends answer `{echo}` once `gate` (if any) opens, with the platform's handler a spy. */
const start = async (options: { token?: string; draining?: boolean; probation?: boolean; budget?: number; gate?: Deferred.Deferred<void>; hosts?: HostsShape } = {}) => {
  const bodies = new BodyBudget(options.budget ?? 1_000_000)
  const passed: Array<Passed> = []
  const sessions = {
    send: (_id: string, input: { message: string }) =>
      Effect.zipRight(options.gate ? Deferred.await(options.gate) : Effect.void, Effect.succeed({ echo: input.message }))
  } as unknown as SessionsShape
  const untouched = new Proxy({}, { get: () => () => Effect.die("not called") }) as IdempotencyShape
  const platform = (req: http.IncomingMessage, res: http.ServerResponse) => {
    const read = preRead.get(req)
    const held = bodies.inUse
    if (read !== undefined) {
      passed.push({ url: req.url!, streamed: undefined, preRead: read.toString(), held })
      return void res.writeHead(299).end()
    }
    const chunks: Array<Buffer> = []
    req.on("data", (c: Buffer) => chunks.push(c))
    req.on("end", () => {
      passed.push({ url: req.url!, streamed: Buffer.concat(chunks).toString(), preRead: undefined, held })
      res.writeHead(299).end()
    })
  }
  const listener = socketListener(
    {
      apiToken: options.token,
      maxRequestBytes: 10_000,
      bodies,
      draining: () => options.draining === true,
      onProbation: () => options.probation === true
    },
    [sends(sessions, untouched), ...(options.hosts ? [hostResultsRoute(options.hosts)] : [])],
    Runtime.defaultRuntime,
    platform
  )
  // As the real listener (Connections.ts): a request without Host reaches the listeners, for the gate to refuse.
  const server = http.createServer({ requireHostHeader: false }, listener)
  servers.push(server)
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return { port: (server.address() as AddressInfo).port, passed, bodies }
}

/** A POST; a `host` header given as "" is left out (no Host at all). */
const post = (port: number, path: string, body: string, { host, ...headers }: Record<string, string> = {}) =>
  new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = http.request({
      port,
      host: "127.0.0.1",
      path,
      method: "POST",
      setHost: host !== "",
      headers: { "content-type": "application/json", "content-length": String(Buffer.byteLength(body)), ...(host ? { host } : {}), ...headers }
    })
    req.on("response", (res) => {
      let text = ""
      res.on("data", (d) => (text += d))
      res.on("end", () => resolve({ status: res.statusCode!, body: text }))
    })
    req.on("error", reject)
    req.end(body)
  })

const SEND = JSON.stringify({ input: { message: "hi" } })

describe("the routes taken at the socket: sends", () => {
  it("answers a send it can take as it stands itself: the platform never sees it, and its bytes are given back after the answer", async () => {
    const { port, passed, bodies } = await start()
    const r = await post(port, PATH, SEND)
    expect(r).toEqual({ status: 200, body: JSON.stringify({ echo: "hi" }) })
    expect(passed).toEqual([])
    expect(bodies.inUse).toBe(0)
  })

  it("passes on, unread, every request the gate must judge before a body: another route, a wrong token, draining, probation, no JSON media type, no or an oversized length, a Content-Encoding, a repeated Idempotency-Key, no Host", async () => {
    const oversized = JSON.stringify({ input: { message: "x".repeat(20_000) } })
    const cases: ReadonlyArray<{ what: string; options?: Parameters<typeof start>[0]; path?: string; headers?: Record<string, string>; body?: string; chunked?: true }> = [
      { what: "another route", path: `/v1/sessions/${ID}/cancel` },
      { what: "a trailing slash", path: `${PATH}/` },
      { what: "a wrong token", options: { token: "t" }, headers: { authorization: "Bearer x" } },
      { what: "draining", options: { draining: true } },
      { what: "a socket on probation", options: { probation: true } },
      { what: "text/plain", headers: { "content-type": "text/plain" } },
      { what: "chunked", chunked: true },
      { what: "oversized", body: oversized },
      { what: "a content coding", headers: { "content-encoding": "gzip" } },
      { what: "a content coding named identity", headers: { "content-encoding": "identity" } },
      { what: "two Idempotency-Keys (joined by Node into one with a comma)", headers: { "idempotency-key": "a, b" } },
      { what: "no Host", headers: { host: "" } }
    ]
    for (const c of cases) {
      const s = await start(c.options)
      const body = c.body ?? SEND
      const r = c.chunked
        ? await new Promise<{ status: number }>((resolve, reject) => {
          const req = http.request({ port: s.port, host: "127.0.0.1", path: PATH, method: "POST", headers: { "content-type": "application/json", "transfer-encoding": "chunked" } })
          req.on("response", (res) => {
            res.resume()
            res.on("end", () => resolve({ status: res.statusCode! }))
          })
          req.on("error", reject)
          req.write(body.slice(0, 3))
          req.end(body.slice(3))
        })
        : await post(s.port, c.path ?? PATH, body, c.headers)
      expect(r.status, c.what).toBe(299)
      expect(s.passed.length, c.what).toBe(1)
      expect(s.passed[0]!.streamed, c.what).toBe(body)
      expect(s.passed[0]!.preRead, c.what).toBeUndefined()
    }
  })

  it("passes on, with the body it read, a send the route does not take as it is, having given back the body's bytes", async () => {
    const bodiesOf = ['{"input":', "[1]", JSON.stringify({ input: { message: 1 } }), JSON.stringify({ input: { message: "hi" }, extra: true })]
    const { port, passed, bodies } = await start()
    for (const body of bodiesOf) expect((await post(port, PATH, body)).status, body).toBe(299)
    expect(passed.map((p) => [p.preRead, p.streamed, p.held])).toEqual(bodiesOf.map((b) => [b, undefined, 0]))
    expect((await post(port, "/v1/sessions/not-an-id/messages", SEND)).status).toBe(299)
    expect(passed.at(-1)!.preRead).toBe(SEND)
    expect(bodies.inUse).toBe(0)
  })

  it("holds a send's bytes in the budget as they arrive (not the length it declares) until its answer, and gives them back when its client goes away first", async () => {
    const gate = Effect.runSync(Deferred.make<void>())
    const { port, bodies } = await start({ gate })
    const answer = post(port, PATH, SEND)
    await expect.poll(() => bodies.inUse).toBe(SEND.length)
    Effect.runSync(Deferred.succeed(gate, undefined))
    expect((await answer).status).toBe(200)
    expect(bodies.inUse).toBe(0)
    // A client gone in the middle of its body: it held what it had sent, not what it declared.
    const gone = http.request({ port, host: "127.0.0.1", path: PATH, method: "POST", headers: { "content-type": "application/json", "content-length": "1000" } })
    gone.on("error", () => {})
    gone.write("{")
    await expect.poll(() => bodies.inUse).toBe(1)
    gone.write('"input"')
    await expect.poll(() => bodies.inUse).toBe(8)
    gone.destroy()
    await expect.poll(() => bodies.inUse).toBe(0)
  })

  it("refuses a send whose arriving bytes the budget cannot hold beside the others: what it held is given back at once, the rest discarded, then 503 overloaded with the connection closed", async () => {
    const { port, bodies, passed } = await start({ budget: 100 })
    // Another body holds 60 bytes.
    bodies.take(60)
    const declared = 1_000
    const refused = new Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }>((resolve, reject) => {
      const req = http.request({ port, host: "127.0.0.1", path: PATH, method: "POST", headers: { "content-type": "application/json", "content-length": String(declared) } })
      req.on("response", (res) => {
        let text = ""
        res.on("data", (d) => (text += d))
        res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body: text }))
      })
      req.on("error", reject)
      // 30 bytes fit beside the 60 held; the next 30 do not.
      req.write("x".repeat(30))
      setTimeout(() => {
        req.write("x".repeat(30))
        setTimeout(() => {
          // Refused already: nothing it sent is held while the rest arrives.
          void expect.poll(() => bodies.inUse).toBe(60).then(() => req.end("x".repeat(declared - 60)), reject)
        }, 50)
      }, 50)
    })
    const r = await refused
    expect(r.status).toBe(503)
    expect(r.headers.connection).toBe("close")
    expect(JSON.parse(r.body)).toMatchObject({ code: "overloaded", retryable: true })
    expect(passed).toEqual([])
    expect(bodies.inUse).toBe(60)
    // Alone, a body larger than the whole budget is served: every legal request can succeed.
    bodies.give(60)
    const alone = JSON.stringify({ input: { message: "y".repeat(500) } })
    expect((await post(port, PATH, alone)).status).toBe(200)
    expect(bodies.inUse).toBe(0)
  })

  it("takes a host's results itself, with the host's own token and while the server drains (the gate lets a host answer work already admitted), answering 204", async () => {
    const HOST = "host_01jdq0000000000000000000ab"
    const taken: Array<unknown> = []
    const hosts = {
      authorize: (host: string, token: string) => host === HOST && token === "bht_right",
      result: (_host: string, call: unknown, answer: unknown) => Effect.sync(() => void taken.push([call, answer]))
    } as unknown as HostsShape
    const { port, passed } = await start({ token: "server-token", draining: true, hosts })
    const body = JSON.stringify({ session_id: ID, sequence: 7, ok: { n: 1 } })
    const r = await post(port, `/v1/hosts/${HOST}/results`, body, { authorization: "Bearer bht_right" })
    expect(r).toEqual({ status: 204, body: "" })
    expect(passed).toEqual([])
    expect(taken).toHaveLength(1)
    // The wrong host token is the handler's refusal, shaped as every refusal is.
    const refused = await post(port, `/v1/hosts/${HOST}/results`, body, { authorization: "Bearer bht_wrong" })
    expect(refused.status).toBe(401)
    expect(JSON.parse(refused.body)).toMatchObject({ code: "unauthorized" })
    expect(passed).toEqual([])
  })
})

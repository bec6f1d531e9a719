/**
 * The listener and the edges of the HTTP API under hostile but legal clients, against real server
 * processes: a flood of silent connections, slow and oversized headers, auth header spellings,
 * bodies that are not UTF-8, start-up failures an operator must be told about, and a corrupt
 * session that must stay visible and removable.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as http from "node:http"
import * as net from "node:net"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { BIN, ensureBuilt, eventually, request, ROOT, ServerProcess, startServer } from "../support/server.js"
import { wellFramed } from "../support/frames.js"
import { forgetCommitLog } from "../support/journals.js"
import { helloLoop } from "../support/wat.js"
import { Brain, BrainError } from "../../src/sdk/index.js"

/** Connections the flood opens, above what a process limited to 1,024 open files can hold. */
const FLOOD = 1_100

/** Opens `n` connections that never send a byte; resolves once all are connected (or refused). */
const silentConnections = async (port: number, n: number) => {
  const sockets: Array<net.Socket> = []
  await Promise.all(Array.from({ length: n }, () =>
    new Promise<void>((resolve) => {
      const s = net.connect(port, "127.0.0.1", () => resolve())
      s.on("error", () => resolve())
      s.on("close", () => resolve())
      sockets.push(s)
    })))
  return sockets
}

/** Sends raw bytes on a fresh connection and collects the answer until the server closes it. */
const raw = (port: number, bytes: string, deadlineMs = 10_000) =>
  new Promise<string>((resolve, reject) => {
    const s = net.connect(port, "127.0.0.1", () => s.write(bytes))
    let answer = ""
    s.setEncoding("utf8")
    s.on("data", (d: string) => void (answer += d))
    s.on("close", () => resolve(answer))
    s.on("error", reject)
    setTimeout(() => {
      s.destroy()
      resolve(answer)
    }, deadlineMs).unref()
  })

const portOf = (server: ServerProcess) => Number(new URL(server.baseUrl).port)

const brain = (...args: Array<string>) => {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 30_000 })
  return { code: r.status, output: r.stdout + r.stderr }
}

describe("connections", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ fileLimit: 1024, env: { BRAIN_HEADERS_TIMEOUT_MS: "3000" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("1,100 silent connections on a 1,024-file process: health still answers, a new client is refused 503 with Brain's body, and all is well once they go", async () => {
    const sockets = await silentConnections(portOf(server), FLOOD)
    try {
      const health = await request(server.baseUrl, "/health/live", { signal: AbortSignal.timeout(5_000) })
      expect(health.status).toBe(204)
      const refused = await request(server.baseUrl, "/v1/sessions", { signal: AbortSignal.timeout(5_000) })
      expect(refused.status).toBe(503)
      expect(refused.body).toMatchObject({ code: "overloaded", retryable: true })
      expect(refused.body.message).toContain("BRAIN_MAX_CONNECTIONS")
    } finally {
      for (const s of sockets) s.destroy()
    }
    await eventually("a new client is served again", async () => {
      const r = await request(server.baseUrl, "/v1/sessions").catch(() => undefined)
      return r?.status === 200 ? r : undefined
    })
    expect(server.exited).toBeUndefined()
  }, 60_000)

  it("headers that do not arrive in time are answered 408, headers too large 431, both in Brain's error shape", async () => {
    const slow = await raw(portOf(server), "GET /v1/sessions HTTP/1.1\r\nHost: x\r\n")
    expect(slow).toMatch(/^HTTP\/1\.1 408 /)
    expect(JSON.parse(slow.slice(slow.indexOf("\r\n\r\n") + 4))).toMatchObject({ code: "invalid_request" })
    const large = await raw(portOf(server), `GET /v1/sessions HTTP/1.1\r\nHost: x\r\nX-Big: ${"a".repeat(64 * 1024)}\r\n\r\n`)
    expect(large).toMatch(/^HTTP\/1\.1 431 /)
    expect(JSON.parse(large.slice(large.indexOf("\r\n\r\n") + 4))).toMatchObject({ code: "invalid_request" })
  }, 30_000)

  it("a body that is not valid UTF-8 is refused with 400 and nothing is created", async () => {
    const before = (await request(server.baseUrl, "/v1/sessions")).body.sessions.length
    const body = Buffer.concat([
      Buffer.from('{"model":{"provider":"scripted"},"system":"'),
      Buffer.from([0xff, 0xfe, 0xc3]),
      Buffer.from('"}')
    ])
    const r = await request(server.baseUrl, "/v1/sessions", { raw: body, headers: { "content-type": "application/json" } })
    expect(r.status).toBe(400)
    expect(r.body).toMatchObject({ code: "invalid_request" })
    expect(r.body.message).toContain("UTF-8")
    expect((await request(server.baseUrl, "/v1/sessions")).body.sessions.length).toBe(before)
  })
})

describe("request bodies held at once", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_INFLIGHT_BODY_BYTES: "1000000" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const createBody = (bytes: number) => {
    const head = '{"model":{"provider":"scripted"},"system":"'
    return head + "s".repeat(bytes - head.length - 2) + '"}'
  }

  it("past BRAIN_INFLIGHT_BODY_BYTES a new body is refused 503 overloaded while another is held; alone, any legal body is served", async () => {
    const held = createBody(800_000)
    // A request that declares its body and sends only half of it: its bytes are held meanwhile.
    const slow = http.request(`${server.baseUrl}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(held) }
    })
    const slowAnswer = new Promise<number>((resolve, reject) => {
      slow.on("response", (res) => {
        res.resume()
        res.on("end", () => resolve(res.statusCode!))
      })
      slow.on("error", reject)
    })
    slow.write(held.slice(0, 400_000))
    const refused = await eventually("a second body to be refused", async () => {
      const r = await request(server.baseUrl, "/v1/sessions", { raw: createBody(800_000), headers: { "content-type": "application/json" } })
      return r.status === 503 ? r : undefined
    })
    expect(refused.body).toMatchObject({ code: "overloaded", retryable: true })
    expect(refused.body.message).toContain("BRAIN_INFLIGHT_BODY_BYTES")
    slow.end(held.slice(400_000))
    expect(await slowAnswer).toBe(201)
    // Alone, even a body above the budget is served: every legal request can succeed.
    const big = await request(server.baseUrl, "/v1/sessions", { raw: createBody(1_500_000), headers: { "content-type": "application/json" } })
    expect(big.status, big.text.slice(0, 200)).toBe(201)
  }, 30_000)

  it("a client that goes away in the middle of its body gives back the bytes it held: the next body is served", async () => {
    const held = createBody(800_000)
    const gone = http.request(`${server.baseUrl}/v1/sessions`, {
      method: "POST",
      headers: { "content-type": "application/json", "content-length": Buffer.byteLength(held) }
    })
    gone.on("error", () => {})
    gone.write(held.slice(0, 400_000))
    // Held: a second body of that size is refused while the first is.
    await eventually("a second body to be refused", async () => {
      const r = await request(server.baseUrl, "/v1/sessions", { raw: createBody(800_000), headers: { "content-type": "application/json" } })
      return r.status === 503 ? r : undefined
    })
    gone.destroy()
    const served = await eventually("the held bytes to be given back", async () => {
      const r = await request(server.baseUrl, "/v1/sessions", { raw: createBody(800_000), headers: { "content-type": "application/json" } })
      return r.status === 201 ? r : undefined
    })
    expect(served.status).toBe(201)
  }, 30_000)
})

describe("auth", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ env: { BRAIN_API_TOKEN: "tok3n" } })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("a 401 says which scheme it wants (WWW-Authenticate: Bearer); the scheme is matched case-insensitively, the token exactly", async () => {
    const none = await request(server.baseUrl, "/v1/sessions")
    expect(none.status).toBe(401)
    expect(none.headers.get("www-authenticate")).toMatch(/^Bearer /)
    for (const header of ["Bearer tok3n", "bearer tok3n", "BEARER tok3n", "bEaReR  tok3n"]) {
      expect((await request(server.baseUrl, "/v1/sessions", { headers: { authorization: header } })).status, header).toBe(200)
    }
    for (const header of ["Bearer TOK3N", "Bearer tok3n x", "Basic tok3n", "tok3n"]) {
      expect((await request(server.baseUrl, "/v1/sessions", { headers: { authorization: header } })).status, header).toBe(401)
    }
  })
})

describe("start-up failures say what and why", () => {
  it("a port in use, a host that does not resolve, a blank token beyond loopback, a bad setting, an idempotency store that cannot open, a connection reserve that leaves SSE streams none: each exits 1 naming the cause", async () => {
    ensureBuilt()
    const holder = await startServer({ entry: "product" })
    // A data directory whose idempotency store cannot be created: a file where its directory goes.
    const blocked = new ServerProcess({ entry: "product" })
    await blocked.start()
    await blocked.stop()
    fs.rmSync(path.join(blocked.dataDir, "idempotency"), { recursive: true, force: true })
    fs.writeFileSync(path.join(blocked.dataDir, "idempotency"), "not a directory")
    const cases: Array<[Record<string, string>, RegExp]> = [
      [{ BRAIN_LISTEN: new URL(holder.baseUrl).host }, /already in use.*EADDRINUSE/],
      [{ BRAIN_LISTEN: "no-such-host.invalid:4000", BRAIN_API_TOKEN: "t" }, /does not resolve.*ENOTFOUND|could not be resolved/],
      [{ BRAIN_LISTEN: "0.0.0.0:0" }, /beyond loopback without BRAIN_API_TOKEN/],
      // A token set blank (`BRAIN_API_TOKEN=$TOKEN` with TOKEN unset) would turn authentication off,
      // and one no header can carry would refuse every request: both refused, on loopback too,
      // naming the setting and never the value.
      [{ BRAIN_LISTEN: "0.0.0.0:0", BRAIN_API_TOKEN: "   " }, /BRAIN_API_TOKEN is set but blank/],
      [{ BRAIN_API_TOKEN: "" }, /BRAIN_API_TOKEN is set but blank/],
      [{ BRAIN_API_TOKEN: " \t " }, /BRAIN_API_TOKEN is set but blank/],
      [{ BRAIN_API_TOKEN: "s3cret\nline" }, /BRAIN_API_TOKEN holds a space, a line break or another character/],
      [{ BRAIN_MAX_TURN_SECS: "soon" }, /BRAIN_MAX_TURN_SECS.*whole number.*soon/],
      [{ BRAIN_DATA_DIR: blocked.dataDir }, /idempotency store cannot be opened.*EEXIST/],
      [{ BRAIN_MAX_CONNECTIONS: "10", BRAIN_RESERVED_CONNECTIONS: "10" }, /BRAIN_RESERVED_CONNECTIONS \(10\) must be below BRAIN_MAX_CONNECTIONS \(10\)/]
    ]
    try {
      for (const [env, expected] of cases) {
        const s = new ServerProcess({ entry: "product", env })
        try {
          const r = await s.spawn()
          expect(r.listening, JSON.stringify(env)).toBe(false)
          if (!r.listening) expect(r.exited.code, JSON.stringify(env)).toBe(1)
          expect(s.output, JSON.stringify(env)).toMatch(expected)
        } finally {
          await s.dispose()
        }
      }
    } finally {
      await holder.dispose()
      await blocked.dispose()
    }
  }, 60_000)
})

describe("a module that cannot be stored", () => {
  it("is the server's failure (500 internal, retryable), not the request's, and the answer names no server path", async () => {
    ensureBuilt()
    const server = await startServer()
    try {
      await server.stop()
      // Where the modules' directory should be, a file: every store of a module fails.
      fs.rmSync(path.join(server.dataDir, "agentloops"), { recursive: true, force: true })
      fs.writeFileSync(path.join(server.dataDir, "agentloops"), "not a directory")
      await server.start()
      const r = await request(server.baseUrl, "/v1/agentloops", { raw: await helloLoop(), headers: { "content-type": "application/wasm" } })
      expect(r.status, r.text).toBe(500)
      expect(r.body).toMatchObject({ code: "internal", retryable: true })
      expect(r.text).not.toContain(server.dataDir)
    } finally {
      await server.dispose()
    }
  }, 60_000)
})

describe("a corrupt session", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({ entry: "product" })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("is listed with status corrupt and where the damage is (relative to the data directory, in the message and in details {file, offset, reason}), and `brain journal remove` takes it away", async () => {
    const make = async () => (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id
    const [healthy, damaged] = [await make(), await make()]
    await server.stop()
    const seg = path.join(server.dataDir, "sessions", damaged, "journal", "00000000000000000001.seg")
    const bytes = fs.readFileSync(seg)
    bytes[20] = bytes[20]! ^ 0xff
    fs.writeFileSync(seg, bytes)
    forgetCommitLog(server.dataDir)
    // Refused while a server holds the data directory.
    await server.start()
    const busy = brain("journal", "remove", server.dataDir, damaged)
    expect(busy.code).toBe(2)
    expect(busy.output).toContain("stop the server first")

    const list = await request(server.baseUrl, "/v1/sessions")
    expect(list.status).toBe(200)
    const entry = list.body.sessions.find((s: any) => s.session_id === damaged)
    expect(entry).toMatchObject({ status: "corrupt", failure: { code: "journal_corrupt" } })
    expect(entry.failure.message).toContain(`sessions/${damaged}/journal/00000000000000000001.seg`)
    const where = { file: `sessions/${damaged}/journal/00000000000000000001.seg`, offset: 0, reason: "frame body checksum mismatch" }
    expect(entry.failure.details).toEqual(where)
    expect(list.body.sessions.find((s: any) => s.session_id === healthy)).toMatchObject({ status: "idle" })
    const get = await request(server.baseUrl, `/v1/sessions/${damaged}`)
    expect(get.status).toBe(500)
    expect(get.body).toEqual({ code: "journal_corrupt", message: expect.stringContaining(where.file), retryable: false, details: where })
    // Every route of the session answers the same refusal, with where the damage is.
    const routes: Array<[string, string, unknown?]> = [
      ["GET", `/v1/sessions/${damaged}/events?after=0`],
      ["GET", `/v1/sessions/${damaged}/transcript`],
      ["POST", `/v1/sessions/${damaged}/messages`, { input: { message: "x" } }],
      ["POST", `/v1/sessions/${damaged}/cancel`],
      ["POST", `/v1/sessions/${damaged}/end`],
      ["DELETE", `/v1/sessions/${damaged}`]
    ]
    for (const [method, route, json] of routes) {
      const r = await request(server.baseUrl, route, { method, ...(json !== undefined ? { json } : {}) })
      expect(r.status, `${method} ${route}`).toBe(500)
      expect(r.body, `${method} ${route}`).toEqual(get.body)
    }
    // The SDK's error carries the same details.
    const sdk = new Brain({ baseUrl: server.baseUrl })
    try {
      const refused = await sdk.sessions.get(damaged).then(() => undefined, (e) => e)
      expect(refused).toBeInstanceOf(BrainError)
      expect(refused).toMatchObject({ status: 500, code: "journal_corrupt", retryable: false, details: where })
    } finally {
      await sdk.close()
    }
    // No error body names where the server keeps its files.
    for (const text of [list.text, get.text]) expect(text).not.toContain(server.dataDir)

    await server.stop()
    const refusedHealthy = brain("journal", "remove", server.dataDir, healthy)
    expect(refusedHealthy.code).toBe(2)
    expect(refusedHealthy.output).toContain("not corrupt")
    const removed = brain("journal", "remove", server.dataDir, damaged)
    expect(removed.code, removed.output).toBe(0)
    await server.start()
    const after = await request(server.baseUrl, "/v1/sessions")
    expect(after.body.sessions.map((s: any) => s.session_id)).toEqual([healthy])
    expect((await request(server.baseUrl, `/v1/sessions/${damaged}`)).status).toBe(404)
  }, 60_000)

  it("a final frame whose checksums hold but whose record cannot be read (not JSON) is the same damage: every route answers 500 journal_corrupt with details naming the frame, it is listed corrupt, and `brain journal remove` takes it away", async () => {
    const id = (await request(server.baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id
    expect((await request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "hi" } } })).status).toBe(200)
    const last = (await request(server.baseUrl, `/v1/sessions/${id}`)).body.last_sequence as number
    await server.stop()
    const seg = path.join(server.dataDir, "sessions", id, "journal", "00000000000000000001.seg")
    const offset = fs.statSync(seg).size
    // A whole frame (DESIGN §2 layout) with the next sequence and both checksums right; its payload is not JSON.
    fs.appendFileSync(seg, wellFramed(last + 1, "kv_put", "{not json"))
    forgetCommitLog(server.dataDir)
    await server.start()
    const where = { file: `sessions/${id}/journal/00000000000000000001.seg`, offset, reason: "unreadable record: kv_put payload is not JSON" }
    for (
      const [method, route] of [
        ["GET", `/v1/sessions/${id}`],
        ["GET", `/v1/sessions/${id}/events?after=0`],
        ["GET", `/v1/sessions/${id}/transcript`],
        ["POST", `/v1/sessions/${id}/end`],
        ["DELETE", `/v1/sessions/${id}`]
      ]
    ) {
      const r = await request(server.baseUrl, route!, { method })
      expect(r.status, `${method} ${route}: ${r.text}`).toBe(500)
      expect(r.body, `${method} ${route}`).toMatchObject({ code: "journal_corrupt", retryable: false, details: where })
    }
    const list = await request(server.baseUrl, "/v1/sessions")
    expect(list.body.sessions.find((s: any) => s.session_id === id)).toMatchObject({ status: "corrupt", failure: { code: "journal_corrupt", details: where } })
    await server.stop()
    const verified = brain("journal", "verify", server.dataDir, id)
    expect(verified.code, verified.output).toBe(2)
    const removed = brain("journal", "remove", server.dataDir, id)
    expect(removed.code, removed.output).toBe(0)
    await server.start()
    expect((await request(server.baseUrl, `/v1/sessions/${id}`)).status).toBe(404)
  }, 60_000)
})

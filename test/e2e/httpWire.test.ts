/**
 * HTTP/1.1 on the wire, against a real server, with raw sockets: pipelined requests on one
 * connection are handled one after another (RFC 9112 §9.3.2), a repeated Host or Content-Type is
 * refused, an absolute-form target is routed by its path, a method Node's parser does not know is
 * answered in Brain's error body, and a lone surrogate escape in a body is refused.
 */
import * as fs from "node:fs"
import * as net from "node:net"
import { describe, expect, it } from "@effect/vitest"
import { eventually, request, sharedServer, sleep } from "../support/server.js"

interface Answer {
  readonly status: number
  readonly headers: Record<string, string>
  readonly body: string
}

/**
 * Writes `bytes` in one write on a fresh connection and reads answers until `count` have come
 * whole (Content-Length framed, or none for 1xx/204/304) or the server closes; answers them and
 * whether the connection was closed by then.
 */
const exchange = (port: number, bytes: string, count: number, deadlineMs = 30_000, more?: (write: (bytes: string) => void) => Promise<void>) =>
  new Promise<{ answers: Array<Answer>; closed: boolean }>((resolve, reject) => {
    const socket = net.connect(port, "127.0.0.1", () => {
      socket.write(bytes)
      void more?.((b) => socket.write(b))
    })
    let buffer = Buffer.alloc(0)
    const answers: Array<Answer> = []
    let closed = false
    const finish = () => {
      clearTimeout(timer)
      socket.destroy()
      resolve({ answers, closed })
    }
    const parse = () => {
      for (;;) {
        const end = buffer.indexOf("\r\n\r\n")
        if (end < 0) return
        const head = buffer.subarray(0, end).toString("latin1").split("\r\n")
        const status = Number(head[0]!.split(" ")[1])
        const headers: Record<string, string> = {}
        for (const line of head.slice(1)) {
          const colon = line.indexOf(":")
          headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim()
        }
        const length = status < 200 || status === 204 || status === 304 ? 0 : Number(headers["content-length"] ?? 0)
        if (buffer.length < end + 4 + length) return
        const body = buffer.subarray(end + 4, end + 4 + length).toString("utf8")
        buffer = buffer.subarray(end + 4 + length)
        if (status >= 200) answers.push({ status, headers, body })
      }
    }
    socket.on("data", (chunk: Buffer) => {
      buffer = Buffer.concat([buffer, chunk])
      parse()
      if (answers.length >= count) finish()
    })
    socket.on("close", () => {
      closed = true
      finish()
    })
    socket.on("error", reject)
    const timer = setTimeout(finish, deadlineMs)
  })

/** Whether the server closes the connection once `bytes` are answered (waits for the close, bounded). */
const closesAfter = (port: number, bytes: string) => exchange(port, bytes, Number.POSITIVE_INFINITY, 15_000)

const json = (method: string, path: string, body: unknown, headers: ReadonlyArray<string> = []) => {
  const text = typeof body === "string" ? body : JSON.stringify(body)
  return `${method} ${path} HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(text)}\r\n${headers.map((h) => `${h}\r\n`).join("")}\r\n${text}`
}

const bare = (method: string, path: string, headers: ReadonlyArray<string> = []) =>
  `${method} ${path} HTTP/1.1\r\nHost: x\r\n${headers.map((h) => `${h}\r\n`).join("")}\r\n`

describe("HTTP/1.1 on the wire", () => {
  const server = sharedServer()
  const port = () => Number(new URL(server().baseUrl).port)

  const newSession = async () => {
    const created = await request(server().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })
    expect(created.status).toBe(201)
    return created.body.session_id as string
  }
  const sessionCount = async () => (await request(server().baseUrl, "/v1/sessions?limit=1000")).body.sessions.length as number
  const turnMessages = async (id: string) => {
    const page = await request(server().baseUrl, `/v1/sessions/${id}/events`)
    return (page.body.events as Array<{ kind: string; data: any }>).filter((e) => e.kind === "turn_started").map((e) => e.data.input?.message as string)
  }
  const send = (id: string, message: string, headers: ReadonlyArray<string> = []) =>
    json("POST", `/v1/sessions/${id}/messages`, { input: { message } }, headers)

  describe("pipelining", () => {
    it("two sends pipelined to one session are handled one after another: both run, in the order written", async () => {
      const id = await newSession()
      const { answers } = await exchange(port(), send(id, "first") + send(id, "second"), 2)
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(JSON.parse(answers[0]!.body).turn.result.text).toContain("first")
      expect(JSON.parse(answers[1]!.body).turn.result.text).toContain("second")
      expect(await turnMessages(id)).toEqual(["first", "second"])
    })

    it("two chunked sends pipelined to one session (the general router) are handled one after another", async () => {
      const id = await newSession()
      const chunked = (message: string) => {
        const body = JSON.stringify({ input: { message } })
        return `POST /v1/sessions/${id}/messages HTTP/1.1\r\nHost: x\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n${Buffer.byteLength(body).toString(16)}\r\n${body}\r\n0\r\n\r\n`
      }
      const { answers } = await exchange(port(), chunked("one") + chunked("two"), 2)
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(await turnMessages(id)).toEqual(["one", "two"])
    })

    it("a read pipelined after a send sees the send's effect", async () => {
      const id = await newSession()
      const { answers } = await exchange(port(), send(id, "seen") + bare("GET", `/v1/sessions/${id}`), 2)
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(JSON.parse(answers[1]!.body).last_sequence).toBe(JSON.parse(answers[0]!.body).last_sequence)
    })

    it("a send pipelined before an end runs first: the send is 200, then the end", async () => {
      const id = await newSession()
      const { answers } = await exchange(port(), send(id, "before the end") + bare("POST", `/v1/sessions/${id}/end`, ["content-length: 0"]), 2)
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(JSON.parse(answers[1]!.body).status).toBe("ended")
      expect(await turnMessages(id)).toEqual(["before the end"])
    })

    it("a keyed delete pipelined after an end is 204, and its key keeps the 204", async () => {
      const id = await newSession()
      const key = `del-${id}`
      const end = bare("POST", `/v1/sessions/${id}/end`, ["content-length: 0"])
      const del = bare("DELETE", `/v1/sessions/${id}`, [`idempotency-key: ${key}`])
      const { answers } = await exchange(port(), end + del, 2)
      expect(answers.map((a) => a.status)).toEqual([200, 204])
      const retried = await request(server().baseUrl, `/v1/sessions/${id}`, { method: "DELETE", headers: { "idempotency-key": key } })
      expect(retried.status).toBe(204)
    })

    it("two creates pipelined with the same Idempotency-Key: the second replays the first, one session is created", async () => {
      const before = await sessionCount()
      const create = json("POST", "/v1/sessions", { model: { provider: "scripted" } }, [`idempotency-key: twin-${Date.now()}`])
      const { answers } = await exchange(port(), create + create, 2)
      expect(answers.map((a) => a.status)).toEqual([201, 201])
      expect(answers[1]!.body).toBe(answers[0]!.body)
      expect(await sessionCount()).toBe(before + 1)
    })

  })

  describe("requests waiting behind a long turn", () => {
    // Short timers, so that a request waiting behind a turn outlasts them.
    const slowServer = sharedServer({ env: { BRAIN_HEADERS_TIMEOUT_MS: "1000", BRAIN_REQUEST_TIMEOUT_MS: "1500" } })
    const slowPort = () => Number(new URL(slowServer().baseUrl).port)
    /** A session whose first turn runs the fixture's `gated` tool, which ends once the file `gate` exists. */
    const gatedSession = async (gate: string) => {
      const created = await request(slowServer().baseUrl, "/v1/sessions", {
        json: {
          model: { provider: "scripted", replies: [{ tool_calls: [{ name: "gated", input: { path: gate } }] }, { text: "done" }] },
          tools: [{ name: "gated" }]
        }
      })
      expect(created.status, created.text).toBe(201)
      return created.body.session_id as string
    }
    const turnsOf = async (id: string) => {
      const page = await request(slowServer().baseUrl, `/v1/sessions/${id}/events`)
      return (page.body.events as Array<{ kind: string; data: any }>).filter((e) => e.kind === "turn_started").map((e) => e.data.input?.message as string)
    }

    it("a request with a large body waiting past the request timeout behind a turn is not refused 408: its time counts from its handover", async () => {
      const gate = `${slowServer().dataDir}.gate-large`
      const id = await gatedSession(gate)
      const other = (await request(slowServer().baseUrl, "/v1/sessions", { json: { model: { provider: "scripted" } } })).body.session_id as string
      // Far above what Node buffers for a request it has not handed over (the socket's high-water mark).
      const large = "x".repeat(512 * 1024)
      const pending = exchange(slowPort(), send(id, "run the gated tool") + json("POST", `/v1/sessions/${other}/messages`, { input: { message: large } }), 2, 120_000)
      await eventually("the gated tool to start", async () => (slowServer().toolCalls().length > 0 ? true : undefined))
      // Past BRAIN_REQUEST_TIMEOUT_MS (and Node's check of it) while the second waits unread.
      await sleep(3_000)
      fs.writeFileSync(gate, "open")
      const { answers } = await pending
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(await turnsOf(other)).toEqual([large])
    })

    it("more requests pipelined behind a turn than the connection holds waiting are all answered, in order, once it ends", async () => {
      const gate = `${slowServer().dataDir}.gate-many`
      const id = await gatedSession(gate)
      const calls = slowServer().toolCalls().length
      const reads = Array.from({ length: 20 }, () => bare("GET", `/v1/sessions/${id}`)).join("")
      // Three writes apart: the first fills what the connection holds waiting, the others arrive
      // while the server is not reading it, and are read once the waiting requests are served.
      const pending = exchange(slowPort(), send(id, "run the gated tool"), 61, 120_000, async (write) => {
        for (let i = 0; i < 3; i++) {
          write(reads)
          await sleep(200)
        }
      })
      await eventually("the gated tool to start", async () => (slowServer().toolCalls().length > calls ? true : undefined))
      await sleep(700)
      fs.writeFileSync(gate, "open")
      const { answers } = await pending
      expect(answers.map((a) => a.status)).toEqual(Array.from({ length: 61 }, () => 200))
      const ended = JSON.parse(answers[0]!.body).last_sequence
      for (const read of answers.slice(1)) expect(JSON.parse(read.body).last_sequence).toBe(ended)
    })

    it("a client that resets its connection while requests wait behind a turn: the waiting requests never run, and the server serves on", async () => {
      const gate = `${slowServer().dataDir}.gate-reset`
      const id = await gatedSession(gate)
      const calls = slowServer().toolCalls().length
      const socket = net.connect(slowPort(), "127.0.0.1")
      socket.on("error", () => undefined)
      await new Promise<void>((resolve) => socket.once("connect", () => resolve()))
      socket.write(send(id, "run the gated tool") + send(id, "waits 1") + send(id, "waits 2"))
      await eventually("the gated tool to start", async () => (slowServer().toolCalls().length > calls ? true : undefined))
      socket.resetAndDestroy()
      fs.writeFileSync(gate, "open")
      expect((await request(slowServer().baseUrl, "/health/live")).status).toBe(204)
      await eventually("the session takes a new turn", async () => {
        const again = await request(slowServer().baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "after" } } })
        return again.status === 200 ? true : undefined
      }, 60_000)
      const turns = await turnsOf(id)
      expect(turns.filter((m) => m.startsWith("waits"))).toEqual([])
      expect(turns.at(-1)).toBe("after")
    })
  })

  describe("headers", () => {
    it("two Host lines are refused 400 naming host, on a send and on a create, and nothing runs", async () => {
      const id = await newSession()
      const before = await sessionCount()
      const twoHosts = (r: string) => r.replace("Host: x\r\n", "Host: x\r\nHost: other.example\r\n")
      const answers = [
        ...(await exchange(port(), twoHosts(send(id, "twice hosted")), 1)).answers,
        ...(await exchange(port(), twoHosts(json("POST", "/v1/sessions", { model: { provider: "scripted" } })), 1)).answers
      ]
      expect(answers.map((a) => a.status)).toEqual([400, 400])
      for (const a of answers) expect(JSON.parse(a.body)).toMatchObject({ code: "invalid_request", details: [{ path: ["host"] }] })
      expect(await turnMessages(id)).toEqual([])
      expect(await sessionCount()).toBe(before)
    })

    it("two Content-Type lines are refused 400 naming content-type, in either order, on a send and on a create", async () => {
      const id = await newSession()
      const before = await sessionCount()
      for (const second of ["text/plain", "application/json"]) {
        const twoTypes = (r: string) => r.replace("content-type: application/json\r\n", `content-type: application/json\r\nContent-Type: ${second}\r\n`)
        const answers = [
          ...(await exchange(port(), twoTypes(send(id, "twice typed")), 1)).answers,
          ...(await exchange(port(), twoTypes(json("POST", "/v1/sessions", { model: { provider: "scripted" } })), 1)).answers
        ]
        expect(answers.map((a) => a.status)).toEqual([400, 400])
        for (const a of answers) expect(JSON.parse(a.body)).toMatchObject({ code: "invalid_request", details: [{ path: ["content-type"] }] })
      }
      expect(await turnMessages(id)).toEqual([])
      expect(await sessionCount()).toBe(before)
    })
  })

  describe("request targets and methods", () => {
    it("an absolute-form target is routed by its path and query, on a send and on the general router", async () => {
      const id = await newSession()
      const origin = `http://127.0.0.1:${port()}`
      const { answers } = await exchange(
        port(),
        send(id, "absolute").replace(`POST /v1/`, `POST ${origin}/v1/`) + bare("GET", `${origin}/v1/sessions?limit=1`),
        2
      )
      expect(answers.map((a) => a.status)).toEqual([200, 200])
      expect(JSON.parse(answers[1]!.body).sessions).toHaveLength(1)
      expect(await turnMessages(id)).toEqual(["absolute"])
    })

    it("a method Node's parser does not know, or a lowercase one, is 405 method_not_allowed in Brain's body with the path's Allow, and the connection closed", async () => {
      const id = await newSession()
      for (const method of ["FOO", "post"]) {
        const { answers, closed } = await closesAfter(port(), send(id, "never").replace(/^POST/, method))
        expect(closed).toBe(true)
        expect(answers).toHaveLength(1)
        expect(answers[0]!.status).toBe(405)
        expect(answers[0]!.headers["allow"]).toBe("POST")
        expect(JSON.parse(answers[0]!.body)).toMatchObject({ code: "method_not_allowed", retryable: false, details: { allow: ["POST"] } })
      }
      const unknownPath = await closesAfter(port(), bare("FOO", "/v1/nowhere"))
      expect(unknownPath.answers[0]!.status).toBe(404)
      expect(JSON.parse(unknownPath.answers[0]!.body)).toMatchObject({ code: "not_found" })
      expect(await turnMessages(id)).toEqual([])
    })
  })

  describe("with an API token", () => {
    const tokened = sharedServer({ env: { BRAIN_API_TOKEN: "wire-token" } })
    it("a method Node's parser does not know is 401 without the token, before anything of the path is told, and 405 with it", async () => {
      const tokenedPort = Number(new URL(tokened().baseUrl).port)
      const without = await closesAfter(tokenedPort, bare("FOO", "/v1/sessions"))
      expect(without.answers[0]!.status).toBe(401)
      expect(without.answers[0]!.headers["www-authenticate"]).toBe('Bearer realm="brain"')
      expect(JSON.parse(without.answers[0]!.body)).toMatchObject({ code: "unauthorized" })
      const withToken = await closesAfter(tokenedPort, bare("FOO", "/v1/sessions", ["Authorization: Bearer wire-token"]))
      expect(withToken.answers[0]!.status).toBe(405)
      expect(withToken.answers[0]!.headers["allow"]).toBe("GET, HEAD, POST")
    })
  })

  describe("JSON text", () => {
    it("a lone surrogate escape in a body is refused 400 naming the path to its string, on a send and a create, and nothing runs", async () => {
      const id = await newSession()
      const before = await sessionCount()
      const sendBody = `{"input":{"message":"sur-\\udc00"}}`
      const createBody = `{"model":{"provider":"scripted"},"system":"x\\ud800"}`
      const { answers } = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, sendBody) + json("POST", "/v1/sessions", createBody), 2)
      expect(answers.map((a) => a.status)).toEqual([400, 400])
      expect(JSON.parse(answers[0]!.body)).toMatchObject({ code: "invalid_request", details: [{ path: ["input", "message"] }] })
      expect(JSON.parse(answers[1]!.body)).toMatchObject({ code: "invalid_request", details: [{ path: ["system"] }] })
      expect(await turnMessages(id)).toEqual([])
      expect(await sessionCount()).toBe(before)
    })

    it("a surrogate pair written as escapes is one character, and taken", async () => {
      const id = await newSession()
      const { answers } = await exchange(port(), json("POST", `/v1/sessions/${id}/messages`, `{"input":{"message":"smile \\ud83d\\ude00"}}`), 1)
      expect(answers[0]!.status).toBe(200)
      expect(await turnMessages(id)).toEqual(["smile \u{1F600}"])
    })
  })
})

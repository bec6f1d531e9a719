/**
 * The probes' listener of its own (BRAIN_HEALTH_LISTEN, docs/operations.md "Probes"), on real
 * server processes: it answers `/health/live` and `/health/ready` as the API's listener does,
 * readiness included (503 while every API connection is taken, and while draining), needs no
 * token, serves nothing else, and a setting that cannot be listened on refuses the start.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as net from "node:net"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { SERVER_NODE_FLAGS } from "../../src/cli/nodeFlags.js"
import { BIN, ensureBuilt, eventually, logMessages, request, type ServerProcess, startServer } from "../support/server.js"
import { connect, exchange, expectBrainError, portOf } from "../support/wire.js"
import { PROBE_CONNECTIONS, PROBE_HEADER_BYTES, PROBE_HEADERS_MS } from "../../src/http/Probes.js"

const TOKEN = "probe-test-token"
const MAX_CONNECTIONS = 8

/** The probes' port, from the server's log line naming where they listen (printed just after the API's). */
const probePort = async (server: ServerProcess): Promise<number> => {
  const line = await eventually("the probes' log line", async () => logMessages(server).find((m) => m.startsWith("health probes also on http://")))
  return Number(/:(\d+)\/health\/live/.exec(line)![1])
}

describe("the probes' listener of its own", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer({
      env: { BRAIN_HEALTH_LISTEN: "127.0.0.1:0", BRAIN_API_TOKEN: TOKEN, BRAIN_MAX_CONNECTIONS: String(MAX_CONNECTIONS), BRAIN_RESERVED_CONNECTIONS: "2" }
    })
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("answers /health/live and /health/ready 204 on a port other than the API's, with no token although the API needs one", async () => {
    const probes = await probePort(server)
    expect(probes).not.toBe(portOf(server))
    const [live, ready] = await exchange(probes, "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\nGET /health/ready?verbose=1 HTTP/1.1\r\nhost: brain\r\n\r\n", 2)
    expect(live?.status).toBe(204)
    expect(ready?.status).toBe(204)
    const [head] = await exchange(probes, "HEAD /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
    expect(head?.status).toBe(204)
    // The API itself still wants its token.
    expect((await request(server.baseUrl, "/v1/sessions")).status).toBe(401)
  })

  it("serves no API route (404 in the API's error body) and no other method on a probe's path (405 with Allow)", async () => {
    const probes = await probePort(server)
    const [sessions] = await exchange(probes, `GET /v1/sessions HTTP/1.1\r\nhost: brain\r\nauthorization: Bearer ${TOKEN}\r\n\r\n`)
    expectBrainError(sessions, 404, "not_found")
    const [post] = await exchange(probes, "POST /health/live HTTP/1.1\r\nhost: brain\r\ncontent-length: 2\r\n\r\n{}")
    expectBrainError(post, 405, "method_not_allowed")
    expect(post?.headers["allow"]).toBe("GET, HEAD")
    expect(post?.body.details).toEqual({ allow: ["GET", "HEAD"] })
  })

  it("no client keeps a probe out: past PROBE_CONNECTIONS silent connections the newcomer is answered and the oldest silent one closed", async () => {
    const probes = await probePort(server)
    const silent = await Promise.all(Array.from({ length: PROBE_CONNECTIONS }, () => connect(probes)))
    try {
      const [live] = await exchange(probes, "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
      expect(live?.status).toBe(204)
      await silent[0]!.until("the oldest silent connection to be closed", () => silent[0]!.ended)
      expect(silent.slice(1).some((w) => !w.ended)).toBe(true)
    } finally {
      for (const w of silent) w.socket.destroy()
    }
  })

  it("a connection that sends no request head within PROBE_HEADERS_MS is answered 408 in Brain's error body and closed", async () => {
    const probes = await probePort(server)
    const silent = await connect(probes)
    // A hang guard far above the bound and the listener's look for it, not a timing claim.
    await silent.until("the server to close it", () => silent.ended, PROBE_HEADERS_MS + 20_000)
    expectBrainError(silent.responses()[0], 408, "invalid_request")
    expect(silent.responses()[0]!.body.message).toContain("PROBE_HEADERS_MS")
  }, 60_000)

  it("a request that cannot be parsed, one without Host and one whose head is too large are refused in Brain's error body (400, 400 naming host, 431)", async () => {
    const probes = await probePort(server)
    const [garbage] = await exchange(probes, "\x01\x02 nonsense\r\n\r\n")
    expectBrainError(garbage, 400, "invalid_request")
    const [hostless] = await exchange(probes, "GET /health/live HTTP/1.1\r\n\r\n")
    expectBrainError(hostless, 400, "invalid_request")
    expect(hostless!.body.details[0].path).toEqual(["host"])
    const [large] = await exchange(probes, `GET /health/live HTTP/1.1\r\nhost: brain\r\nx-pad: ${"a".repeat(PROBE_HEADER_BYTES + 1024)}\r\n\r\n`)
    expectBrainError(large, 431, "invalid_request")
  })

  it("/health/ready is 503 overloaded on the probes' listener while every API connection is taken, live stays 204, and ready is 204 again once they go", async () => {
    const probes = await probePort(server)
    const held = await Promise.all(Array.from({ length: MAX_CONNECTIONS }, () => connect(portOf(server))))
    try {
      const ready = await eventually("ready to say 503", async () => {
        const [answer] = await exchange(probes, "GET /health/ready HTTP/1.1\r\nhost: brain\r\n\r\n")
        return answer?.status === 503 ? answer : undefined
      })
      expectBrainError(ready, 503, "overloaded")
      expect(ready.body.message).toContain("BRAIN_MAX_CONNECTIONS")
      expect(ready.headers["retry-after"]).toBe("1")
      const [live] = await exchange(probes, "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
      expect(live?.status).toBe(204)
    } finally {
      for (const h of held) h.socket.destroy()
    }
    await eventually("ready again", async () => {
      const [answer] = await exchange(probes, "GET /health/ready HTTP/1.1\r\nhost: brain\r\n\r\n")
      return answer?.status === 204 ? true : undefined
    })
  })
})

describe("the probes' listener while the server stops", () => {
  it("says /health/ready 503 draining while a turn is drained, /health/live 204, and closes with the server", async () => {
    ensureBuilt()
    const server = await startServer({ env: { BRAIN_HEALTH_LISTEN: "127.0.0.1:0" } })
    try {
      const probes = await probePort(server)
      const created = await request(server.baseUrl, "/v1/sessions", {
        json: { model: { provider: "scripted", replies: [{ text: "slow", delay_ms: 4_000 }] } }
      })
      expect(created.status, created.text).toBe(201)
      const id = created.body.session_id as string
      const turn = request(server.baseUrl, `/v1/sessions/${id}/messages`, { json: { input: { message: "go" } } })
      await eventually("the turn to run", async () => ((await request(server.baseUrl, `/v1/sessions/${id}`)).body?.status === "running" ? true : undefined))
      server.child.kill("SIGTERM")
      const ready = await eventually("ready to say draining", async () => {
        const [answer] = await exchange(probes, "GET /health/ready HTTP/1.1\r\nhost: brain\r\n\r\n")
        return answer?.status === 503 ? answer : undefined
      })
      expectBrainError(ready, 503, "overloaded")
      expect(ready.body.message).toContain("draining")
      const [live] = await exchange(probes, "GET /health/live HTTP/1.1\r\nhost: brain\r\n\r\n")
      expect(live?.status).toBe(204)
      expect((await turn).status).toBe(200)
      const exited = await server.stop()
      expect(exited.code, server.output).toBe(0)
      // Nothing listens there any more.
      const refused = await new Promise<boolean>((resolve) => {
        const s = net.connect(probes, "127.0.0.1", () => {
          s.destroy()
          resolve(false)
        })
        s.on("error", () => resolve(true))
      })
      expect(refused).toBe(true)
    } finally {
      await server.dispose()
    }
  }, 60_000)
})

/** The messages of a process's JSON log lines. */
const messagesOf = (output: string): Array<string> =>
  output.split("\n").flatMap((line) => {
    try {
      return [String((JSON.parse(line) as { readonly message: unknown }).message)]
    } catch {
      return []
    }
  })

describe("a BRAIN_HEALTH_LISTEN the server cannot listen on", () => {
  const start = (healthListen: string) => {
    const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-probes-"))
    try {
      return spawnSync(process.execPath, [...SERVER_NODE_FLAGS, BIN, "serve"], {
        env: { ...process.env, BRAIN_LISTEN: "127.0.0.1:0", BRAIN_DATA_DIR: dataDir, BRAIN_HEALTH_LISTEN: healthListen },
        encoding: "utf8",
        timeout: 60_000
      })
    } finally {
      fs.rmSync(dataDir, { recursive: true, force: true })
    }
  }

  it("refuses to start, naming BRAIN_HEALTH_LISTEN, when it is not host:port", () => {
    ensureBuilt()
    const r = start("nine-thousand")
    expect(r.status).not.toBe(0)
    expect(messagesOf(r.stdout + r.stderr)).toContain('brain serve: BRAIN_HEALTH_LISTEN "nine-thousand" is not host:port')
  }, 70_000)

  it("refuses to start, naming BRAIN_HEALTH_LISTEN and why, when its address is in use", async () => {
    ensureBuilt()
    const taken = net.createServer()
    await new Promise<void>((resolve) => taken.listen(0, "127.0.0.1", resolve))
    try {
      const port = (taken.address() as net.AddressInfo).port
      const r = start(`127.0.0.1:${port}`)
      expect(r.status).not.toBe(0)
      expect(messagesOf(r.stdout + r.stderr).some((m) => m.includes(`cannot listen on 127.0.0.1:${port} (BRAIN_HEALTH_LISTEN): the address is already in use`))).toBe(true)
    } finally {
      taken.close()
    }
  }, 70_000)
})

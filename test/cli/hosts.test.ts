/**
 * The operator's path for host registrations, as child processes beside a real server:
 * `brain hosts list` shows each registration (id, registered, last connected, idle since, the
 * sessions naming it that still exist; never a token) and runs beside a server, writing nothing;
 * `brain hosts remove` refuses while the server runs and changes nothing, and with the server
 * stopped removes durably, as the host's own removal would: after the restart its token opens
 * nothing and a session naming it has its host tool's call fail `host_unknown`, sent to no one.
 */
import { spawnSync } from "node:child_process"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import type { HostId } from "../../src/domain/Ids.js"
import { registrationLine } from "../../src/layers/hosts/Registrations.js"
import { FORMAT } from "../../src/layers/journal/DataDir.js"
import { BIN, ensureBuilt, eventually, request, ROOT, type ServerProcess, startServer } from "../support/server.js"

const brain = (...args: Array<string>) => {
  const r = spawnSync(process.execPath, [BIN, ...args], { cwd: ROOT, encoding: "utf8", timeout: 30_000, killSignal: "SIGKILL" })
  return { code: r.status, stdout: r.stdout, stderr: r.stderr, output: r.stdout + r.stderr }
}

interface Registered {
  readonly host_id: string
  readonly token: string
}

describe("brain hosts list and remove", () => {
  let server: ServerProcess
  beforeAll(async () => {
    ensureBuilt()
    server = await startServer()
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  const file = () => path.join(server.dataDir, "hosts", "registrations.jsonl")
  const register = async (): Promise<Registered> => {
    const r = await request(server.baseUrl, "/v1/hosts", { method: "POST" })
    expect(r.status, r.text).toBe(201)
    return r.body
  }
  const createNaming = async (host: string, replies: ReadonlyArray<unknown>) => {
    const r = await request(server.baseUrl, "/v1/sessions", {
      json: {
        model: { provider: "scripted", replies },
        environments: [{ name: "app", driver: "host", host }],
        tools: [{ name: "lookup", description: "looks up", environment: "app" }]
      }
    })
    expect(r.status, r.text).toBe(201)
    return r.body.session_id as string
  }

  it("list shows each registration with its times and the sessions naming it that still exist, never a token, beside a running server, and writes nothing", async () => {
    const quiet = await register()
    const used = await register()
    const stream = new AbortController()
    const opened = await fetch(server.url(`/v1/hosts/${used.host_id}/commands`), { headers: { authorization: `Bearer ${used.token}` }, signal: stream.signal })
    expect(opened.status).toBe(200)
    const kept = await createNaming(used.host_id, [{ text: "hi" }])
    const deleted = await createNaming(used.host_id, [{ text: "hi" }])
    expect((await request(server.baseUrl, `/v1/sessions/${deleted}/end`, { method: "POST" })).status).toBe(200)
    expect((await request(server.baseUrl, `/v1/sessions/${deleted}`, { method: "DELETE" })).status).toBe(204)
    stream.abort()
    await eventually("the stream's close to be recorded", async () => (fs.readFileSync(file(), "utf8").includes("idle_since_ms") ? true : undefined))
    const before = fs.readFileSync(file())

    const r = brain("hosts", "list", server.dataDir)
    expect(r.code, r.output).toBe(0)
    const lines = r.stdout.split("\n").filter((l) => l !== "")
    const quietLine = lines.find((l) => l.startsWith(`${quiet.host_id}: `))!
    const usedLine = lines.find((l) => l.startsWith(`${used.host_id}: `))!
    expect(quietLine).toMatch(/: registered \d{4}-\d\d-\d\dT[^;]*Z; never connected; idle since \d{4}-[^;]*Z; named by no session$/)
    expect(usedLine).toMatch(/; last connected until \d{4}-[^;]*Z; idle since \d{4}-[^;]*Z; named by 1 session\(s\): /)
    expect(usedLine).toContain(kept)
    expect(usedLine).not.toContain(deleted)
    expect(lines.at(-1)).toBe("2 host registration(s) in hosts/registrations.jsonl (a server keeps at most 4096)")
    for (const secret of [quiet.token, used.token]) expect(r.output).not.toContain(secret)
    expect(r.output).not.toMatch(/[0-9a-f]{64}/)
    expect(fs.readFileSync(file()).equals(before)).toBe(true)
  }, 60_000)

  it("remove refuses while the server runs and changes nothing; stopped, it removes durably: the restarted server no longer knows the host, its token opens nothing, and a session naming it has its tool call fail host_unknown, sent to no one", async () => {
    const host = await register()
    const other = await register()
    const session = await createNaming(host.host_id, [{ tool_calls: [{ name: "lookup", input: { q: 1 } }] }, { text: "done" }])
    const before = fs.readFileSync(file())

    const refused = brain("hosts", "remove", server.dataDir, host.host_id)
    expect(refused.code, refused.output).toBe(1)
    expect(refused.stderr).toContain("stop the server")
    expect(fs.readFileSync(file()).equals(before)).toBe(true)

    await server.stop()
    // Every id is checked first: one unknown refuses them all.
    const unknown = "host_01hzzzzzzzzzzzzzzzzzzzzzzz"
    const partly = brain("hosts", "remove", server.dataDir, host.host_id, unknown)
    expect(partly.code, partly.output).toBe(66)
    expect(partly.stderr.trim()).toBe(`${unknown}: no such host registration in ${server.dataDir}`)
    const notAnId = brain("hosts", "remove", server.dataDir, "host-1")
    expect(notAnId.code, notAnId.output).toBe(64)
    expect(notAnId.stderr).toContain("host-1: not a host id")
    expect(fs.readFileSync(file()).equals(before)).toBe(true)

    const removed = brain("hosts", "remove", server.dataDir, host.host_id)
    expect(removed.code, removed.output).toBe(0)
    expect(removed.stdout).toContain(`${host.host_id}: removed; 1 session(s) name it, whose calls of its tools now fail host_unknown`)
    const last = JSON.parse(fs.readFileSync(file(), "utf8").trim().split("\n").at(-1)!)
    expect(last).toMatchObject({ host_id: host.host_id, by: "operator" })
    expect(brain("hosts", "list", server.dataDir).stdout).not.toContain(host.host_id)

    await server.start()
    const stream = await fetch(server.url(`/v1/hosts/${host.host_id}/commands`), { headers: { authorization: `Bearer ${host.token}` } })
    expect(stream.status).toBe(401)
    await stream.body?.cancel()
    const probe = await request(server.baseUrl, `/v1/hosts/${other.host_id}/results`, {
      json: { session_id: session, sequence: 1, ok: null },
      headers: { authorization: `Bearer ${other.token}` }
    })
    expect(probe.status, probe.text).toBe(409)
    const sent = await request(server.baseUrl, `/v1/sessions/${session}/messages`, { json: { input: { message: "go" } } })
    expect(sent.status, sent.text).toBe(200)
    const events = (await request(server.baseUrl, `/v1/sessions/${session}/events`)).body.events as Array<{ kind: string; data: any }>
    const failed = events.find((e) => e.kind === "tool_call_failed")!
    expect(failed.data).toMatchObject({ outcome: "error", failure: { code: "environment_failed", ambiguous: false, details: { reason: "host_unknown" } } })
  }, 60_000)
})

describe("brain hosts remove: a torn last line", () => {
  beforeAll(() => ensureBuilt(), 120_000)

  it("a file ending in a torn line (a write cut off by a crash) does not swallow the removal: it removes the host, for good, and list then shows it no more", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-cli-"))
    try {
      fs.writeFileSync(path.join(dir, "format"), `${FORMAT}\n`)
      fs.mkdirSync(path.join(dir, "hosts"))
      const [gone, kept] = ["host_01m985qz0000000000000000aa", "host_01m985qz0000000000000000bb"] as Array<HostId>
      const file = path.join(dir, "hosts", "registrations.jsonl")
      const torn = registrationLine(kept, Buffer.alloc(32, 2), 2).slice(0, 40)
      fs.writeFileSync(file, `${registrationLine(gone, Buffer.alloc(32, 1), 1)}\n${torn}`)
      const removed = brain("hosts", "remove", dir, gone)
      expect(removed.code, removed.output).toBe(0)
      expect(removed.stdout).toContain(`${gone}: removed`)
      const listed = brain("hosts", "list", dir)
      expect(listed.code, listed.output).toBe(0)
      expect(listed.stdout).not.toContain(gone)
      expect(listed.stdout).toContain("0 host registration(s)")
      // The torn line stays what it was (a line no reader takes), not part of the next one.
      expect(fs.readFileSync(file, "utf8").split("\n")).toContain(torn)
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })

  it("a registrations file that cannot be read: list and remove exit 74 naming the file, never list it as holding no host, and write nothing", () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-cli-"))
    try {
      fs.writeFileSync(path.join(dir, "format"), `${FORMAT}\n`)
      // A directory where the file goes: reading it fails EISDIR (these tests run as root, past modes).
      fs.mkdirSync(path.join(dir, "hosts", "registrations.jsonl"), { recursive: true })
      const listed = brain("hosts", "list", dir)
      expect(listed.code, listed.output).toBe(74)
      expect(listed.stderr).toContain("registrations.jsonl cannot be read (EISDIR)")
      expect(listed.stdout).not.toContain("host registration(s)")
      const removed = brain("hosts", "remove", dir, "host_01m985qz0000000000000000aa")
      expect(removed.code, removed.output).toBe(74)
      expect(removed.stderr).toContain("registrations.jsonl cannot be read (EISDIR)")
      expect(fs.readdirSync(path.join(dir, "hosts", "registrations.jsonl"))).toEqual([])
    } finally {
      fs.rmSync(dir, { recursive: true, force: true })
    }
  })
})

/**
 * The host registry's file (`{dataDir}/hosts/registrations.jsonl`): a removal is durable and final,
 * a removed host frees its place under MAX_HOSTS' count, and a start compacts a file that holds
 * more removals than it needs, keeping exactly the registrations that stand.
 *
 * Idle expiry, on the test clock: a registration with no command stream and no existing session
 * naming it is removed once it has been idle for the expiry, durably, and not before; a connected
 * host and one a session names never expire; a restart does not reset the idle clock, and counts
 * a host whose stream was open when it stopped as connected until the restart, once. At MAX_HOSTS
 * a registration is refused, retryable only when expiry will free room by itself.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, TestClock } from "effect"
import type { HostId, SessionId } from "../../src/domain/Ids.js"
import { MAX_HOSTS } from "../../src/domain/Limits.js"
import { make } from "../../src/layers/HostsFile.js"
import { registrationLine } from "../../src/layers/hosts/Registrations.js"

const options = (dataDir: string) => ({ dataDir, graceMs: 100, heartbeatMs: 0, maxResultBytes: 1024 })
const fileOf = (dataDir: string) => path.join(dataDir, "hosts", "registrations.jsonl")
const linesOf = (dataDir: string) => fs.readFileSync(fileOf(dataDir), "utf8").split("\n").filter((l) => l !== "")

describe("the host registry's file", () => {
  it.scoped("a removed host stays removed after a restart, its token authorizes nothing, and the others stand", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const first = yield* make(options(dir))
      const a = yield* first.register
      const b = yield* first.register
      yield* first.unregister(a.host_id)
      expect(first.isRegistered(a.host_id)).toBe(false)
      expect(first.authorize(a.host_id, a.token)).toBe(false)
      const again = yield* make(options(dir))
      expect(again.isRegistered(a.host_id)).toBe(false)
      expect(again.authorize(a.host_id, a.token)).toBe(false)
      expect(again.authorize(b.host_id, b.token)).toBe(true)
    }))

  it.scoped("a registrations file that exists but cannot be read fails the registry's start, naming the file and the error, and is left as it is (never read as holding no host)", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-unreadable-"))
      // A directory where the file goes: read fails EISDIR (a server run as root reads past modes).
      fs.mkdirSync(fileOf(dir), { recursive: true })
      const started = yield* Effect.either(make(options(dir)))
      expect(Either.isLeft(started)).toBe(true)
      if (Either.isLeft(started)) {
        expect(started.left._tag).toBe("RegistrationsUnreadable")
        expect(started.left.message).toContain(`${fileOf(dir)} cannot be read (EISDIR)`)
      }
      expect(fs.statSync(fileOf(dir)).isDirectory()).toBe(true)
    }))

  it.scoped("a start rewrites a file of many removals to the registrations that stand, which keep their tokens", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const first = yield* make(options(dir))
      const kept = yield* first.register
      for (let i = 0; i < 40; i++) {
        const r = yield* first.register
        yield* first.unregister(r.host_id)
      }
      expect(linesOf(dir)).toHaveLength(81)
      const again = yield* make(options(dir))
      expect(linesOf(dir)).toHaveLength(1)
      expect(JSON.parse(linesOf(dir)[0]!)).toMatchObject({ host_id: kept.host_id })
      expect(again.authorize(kept.host_id, kept.token)).toBe(true)
      const third = yield* make(options(dir))
      expect(third.authorize(kept.host_id, kept.token)).toBe(true)
      expect(fs.readdirSync(path.dirname(fileOf(dir)))).toEqual(["registrations.jsonl"])
    }))
})

describe("a torn last line in the host registry's file", () => {
  /** What a write cut off by a crash leaves: the start of a registration line, with no end. */
  const tear = (dir: string) => fs.appendFileSync(fileOf(dir), `{"host_id":"host_01m985qz0000000000000000aa","token_sha256":"ab`)

  it.scoped("never swallows the next write: a registration answered after a start on it, and a removal, both survive the next restart", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const first = yield* make(options(dir))
      const kept = yield* first.register
      const removed = yield* first.register
      tear(dir)
      const second = yield* make(options(dir))
      const added = yield* second.register
      yield* second.unregister(removed.host_id)
      const third = yield* make(options(dir))
      expect(third.authorize(kept.host_id, kept.token)).toBe(true)
      expect(third.authorize(added.host_id, added.token)).toBe(true)
      expect(third.isRegistered(removed.host_id)).toBe(false)
      expect(third.authorize(removed.host_id, removed.token)).toBe(false)
    }))
})

describe("MAX_HOSTS", () => {
  /** A registrations file holding `n` registrations, as a server that made them leaves it. */
  const filled = (n: number) => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
    fs.mkdirSync(path.dirname(fileOf(dir)), { recursive: true })
    const lines = Array.from({ length: n }, (_, i) => registrationLine(`host_${String(i).padStart(26, "0")}` as HostId, Buffer.alloc(32, 1), 0))
    fs.writeFileSync(fileOf(dir), lines.join("\n") + "\n")
    return dir
  }
  const standing = (dataDir: string) => new Set(recorded(dataDir).filter((l) => l.token_sha256 !== undefined).map((l) => l.host_id)).size

  it.scoped("concurrent registrations at the bound never pass it: as many succeed as there is room for, the rest are refused overloaded, and the file holds MAX_HOSTS", () =>
    Effect.gen(function*() {
      const room = 8
      const dir = filled(MAX_HOSTS - room)
      const hosts = yield* make(options(dir))
      const outcomes = yield* Effect.all(Array.from({ length: 4 * room }, () => Effect.either(hosts.register)), { concurrency: "unbounded" })
      const refused = outcomes.filter(Either.isLeft).map((o) => o.left._tag)
      expect(outcomes.filter(Either.isRight)).toHaveLength(room)
      expect(new Set(refused)).toEqual(new Set(["Overloaded"]))
      expect(standing(dir)).toBe(MAX_HOSTS)
      const again = yield* make(options(dir))
      expect((yield* Effect.flip(again.register))._tag).toBe("Overloaded")
    }), 60_000)

  it.scoped("a registration whose write fails gives its place back: the next one takes it", () =>
    Effect.gen(function*() {
      const dir = filled(MAX_HOSTS - 1)
      const hosts = yield* make(options(dir))
      const saved = fs.readFileSync(fileOf(dir))
      // The file cannot be opened for appending (a directory in its place).
      fs.rmSync(fileOf(dir))
      fs.mkdirSync(fileOf(dir))
      expect((yield* Effect.flip(hosts.register))._tag).toBe("Internal")
      fs.rmdirSync(fileOf(dir))
      fs.writeFileSync(fileOf(dir), saved)
      const last = yield* hosts.register
      expect(hosts.isRegistered(last.host_id)).toBe(true)
      expect((yield* Effect.flip(hosts.register))._tag).toBe("Overloaded")
    }), 60_000)
})

const EXPIRY_MS = 10_000
const expiring = (dataDir: string | undefined, live?: Set<string>) => ({
  dataDir,
  graceMs: 100,
  heartbeatMs: 0,
  maxResultBytes: 1024,
  idleExpiryMs: EXPIRY_MS,
  ...(live ? { sessionExists: (s: SessionId) => Effect.sync(() => live.has(s)) } : {})
})
const session = (n: number) => `ses_${String(n).padStart(26, "0")}` as SessionId
const recorded = (dataDir: string) => linesOf(dataDir).map((l) => JSON.parse(l) as Record<string, unknown>)

/** Waits (in real time: the test clock stands still) until the file shows what `check` looks for. */
const fileShows = (dataDir: string, check: (lines: Array<Record<string, unknown>>) => boolean) =>
  Effect.gen(function*() {
    for (let i = 0; i < 500; i++) {
      if (fs.existsSync(fileOf(dataDir)) && check(recorded(dataDir))) return
      yield* Effect.promise(() => new Promise((r) => setTimeout(r, 10)))
    }
    return yield* Effect.die(new Error(`the file never showed it: ${fs.readFileSync(fileOf(dataDir), "utf8")}`))
  })

describe("host registrations' idle expiry", () => {
  it.scoped("a registration with no stream and no session naming it is removed once idle for the expiry, not a millisecond before, durably: after a restart it is gone and its token opens nothing", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const hosts = yield* make(expiring(dir))
      const a = yield* hosts.register
      yield* TestClock.adjust(EXPIRY_MS - 1)
      expect(yield* hosts.expire).toEqual([])
      expect(hosts.isRegistered(a.host_id)).toBe(true)
      yield* TestClock.adjust(1)
      yield* hosts.expire
      expect(hosts.isRegistered(a.host_id)).toBe(false)
      expect(hosts.authorize(a.host_id, a.token)).toBe(false)
      expect(recorded(dir).at(-1)).toEqual({ host_id: a.host_id, removed_at_ms: EXPIRY_MS, by: "expiry" })
      const again = yield* make(expiring(dir))
      expect(again.isRegistered(a.host_id)).toBe(false)
      expect(again.authorize(a.host_id, a.token)).toBe(false)
    }))

  it.scoped("a host whose command stream is open never expires; its idle time counts from the stream's close, and a replaced stream leaves it connected", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const hosts = yield* make(expiring(dir))
      const a = yield* hosts.register
      const first = yield* hosts.connect(a.host_id)
      yield* TestClock.adjust(2 * EXPIRY_MS)
      // A new stream replaces the old one: the host is never idle between them.
      const second = yield* hosts.connect(a.host_id)
      yield* first.stop
      yield* TestClock.adjust(2 * EXPIRY_MS)
      yield* hosts.expire
      expect(hosts.isRegistered(a.host_id)).toBe(true)
      yield* second.stop
      const closedAt = 4 * EXPIRY_MS
      yield* fileShows(dir, (lines) => lines.some((l) => l.idle_since_ms === closedAt))
      yield* TestClock.adjust(EXPIRY_MS - 1)
      yield* hosts.expire
      expect(hosts.isRegistered(a.host_id)).toBe(true)
      yield* TestClock.adjust(1)
      yield* hosts.expire
      expect(hosts.isRegistered(a.host_id)).toBe(false)
    }))

  it.scoped("a registration named by a session that still exists never expires, across a restart; once the session is released or found gone, it expires", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const live = new Set<string>([session(1), session(2)])
      const hosts = yield* make(expiring(dir, live))
      const a = yield* hosts.register
      const b = yield* hosts.register
      yield* hosts.use(a.host_id, session(1))
      yield* hosts.use(b.host_id, session(2))
      expect(recorded(dir).filter((l) => l.session_id !== undefined)).toEqual([
        { host_id: a.host_id, session_id: session(1), named_at_ms: 0 },
        { host_id: b.host_id, session_id: session(2), named_at_ms: 0 }
      ])
      yield* TestClock.adjust(3 * EXPIRY_MS)
      expect(yield* hosts.expire).toEqual([])
      // The naming is on file: a restart keeps it.
      const again = yield* make(expiring(dir, live))
      yield* TestClock.adjust(3 * EXPIRY_MS)
      expect(yield* again.expire).toEqual([])
      expect([again.isRegistered(a.host_id), again.isRegistered(b.host_id)]).toEqual([true, true])
      // Session 1 is deleted (its release); session 2's directory is gone with no release (a crash).
      yield* again.release(a.host_id, session(1))
      live.delete(session(2))
      expect([...(yield* again.expire)].sort()).toEqual([a.host_id, b.host_id].sort())
      expect([again.isRegistered(a.host_id), again.isRegistered(b.host_id)]).toEqual([false, false])
    }))

  it.scoped("naming a host removed meanwhile is refused (invalid_request) and records nothing", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const hosts = yield* make(expiring(dir))
      const a = yield* hosts.register
      yield* TestClock.adjust(EXPIRY_MS)
      yield* hosts.expire
      const before = fs.readFileSync(fileOf(dir), "utf8")
      const refused = yield* Effect.flip(hosts.use(a.host_id, session(1)))
      expect(refused._tag).toBe("InvalidRequest")
      expect(refused.message).toContain("no host is registered")
      expect(fs.readFileSync(fileOf(dir), "utf8")).toBe(before)
    }))

  it.scoped("a restart does not reset the idle clock: a host idle before it expires on time; one whose stream was open when the server died counts as connected until the restart, and a second restart moves that no further", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      // This registry is never closed, as a server killed with its streams open.
      const first = yield* make(expiring(dir))
      const idle = yield* first.register
      const open = yield* first.register
      const stream = yield* first.connect(idle.host_id)
      yield* first.connect(open.host_id)
      yield* TestClock.adjust(1_000)
      yield* stream.stop
      yield* fileShows(dir, (lines) => lines.some((l) => l.host_id === idle.host_id && l.idle_since_ms === 1_000))
      // Restarted at 9 s: `idle` has been idle since 1 s; `open` counts as connected until 9 s.
      yield* TestClock.adjust(8_000)
      const second = yield* make(expiring(dir))
      expect(recorded(dir).at(-1)).toEqual({ host_id: open.host_id, idle_since_ms: 9_000 })
      yield* TestClock.adjust(1_000 + EXPIRY_MS - 9_000 - 1)
      yield* second.expire
      expect(second.isRegistered(idle.host_id)).toBe(true)
      yield* TestClock.adjust(1)
      yield* second.expire
      expect(second.isRegistered(idle.host_id)).toBe(false)
      expect(second.isRegistered(open.host_id)).toBe(true)
      // Restarted again at 15 s: `open` is still idle since 9 s, not since 15 s.
      yield* TestClock.adjust(4_000)
      const third = yield* make(expiring(dir))
      expect(third.isRegistered(idle.host_id)).toBe(false)
      yield* TestClock.adjust(9_000 + EXPIRY_MS - 15_000 - 1)
      yield* third.expire
      expect(third.isRegistered(open.host_id)).toBe(true)
      yield* TestClock.adjust(1)
      yield* third.expire
      expect(third.isRegistered(open.host_id)).toBe(false)
    }))

  it.scoped("a restart never makes an idle registration look fresh: one that came due while the server was down is gone at start, before any sweep: its token authorizes nothing, its stream and a session naming it are refused, and its expiry is on file", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      // Registered, then the server stops (its scope closes: no sweep runs after).
      const { due, young } = yield* Effect.scoped(Effect.gen(function*() {
        const first = yield* make(expiring(dir))
        const due = yield* first.register
        yield* TestClock.adjust(EXPIRY_MS / 2)
        return { due, young: yield* first.register }
      }))
      yield* TestClock.adjust(EXPIRY_MS / 2 + 1)
      const again = yield* make(expiring(dir))
      expect(again.isRegistered(due.host_id)).toBe(false)
      expect(again.authorize(due.host_id, due.token)).toBe(false)
      expect((yield* Effect.flip(again.connect(due.host_id)))._tag).toBe("Unauthorized")
      expect((yield* Effect.flip(again.use(due.host_id, session(1))))._tag).toBe("InvalidRequest")
      expect(recorded(dir).filter((l) => l.by === "expiry")).toEqual([{ host_id: due.host_id, removed_at_ms: EXPIRY_MS + 1, by: "expiry" }])
      // One not yet due stands.
      expect(again.authorize(young.host_id, young.token)).toBe(true)
    }))

  it.scoped("a registration that has come due is refused at once, not at the next sweep: its token authorizes nothing, its stream and a session naming it are refused, and its removal is on file", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const hosts = yield* make(expiring(dir))
      // Registered between two sweeps (every EXPIRY_MS / 10), so it comes due between two.
      yield* TestClock.adjust(EXPIRY_MS / 20)
      const a = yield* hosts.register
      const b = yield* hosts.register
      const c = yield* hosts.register
      yield* TestClock.adjust(EXPIRY_MS - 1)
      expect([hosts.authorize(a.host_id, a.token), hosts.isRegistered(a.host_id)]).toEqual([true, true])
      yield* TestClock.adjust(1)
      expect([hosts.authorize(a.host_id, a.token), hosts.isRegistered(a.host_id)]).toEqual([false, false])
      expect((yield* Effect.flip(hosts.connect(b.host_id)))._tag).toBe("Unauthorized")
      expect((yield* Effect.flip(hosts.use(c.host_id, session(1))))._tag).toBe("InvalidRequest")
      expect(recorded(dir).filter((l) => l.by === "expiry").map((l) => l.host_id).sort()).toEqual([b.host_id, c.host_id].sort())
    }))

  it.scoped("a registration recorded before sessions were recorded (no sessions_recorded) never expires by itself", () =>
    Effect.gen(function*() {
      const dir = fs.mkdtempSync(path.join(os.tmpdir(), "brain-hosts-"))
      const id = "host_01hzzzzzzzzzzzzzzzzzzzzzzz" as HostId
      fs.mkdirSync(path.dirname(fileOf(dir)), { recursive: true })
      fs.writeFileSync(fileOf(dir), JSON.stringify({ host_id: id, token_sha256: "0".repeat(64), registered_at_ms: 0 }) + "\n")
      const hosts = yield* make(expiring(dir))
      yield* TestClock.adjust(3 * EXPIRY_MS)
      expect(yield* hosts.expire).toEqual([])
      expect(hosts.isRegistered(id)).toBe(true)
    }))

  it.scoped("at MAX_HOSTS a registration is refused 503 overloaded: retryable, with retry_after_ms, while an idle registration nothing names will expire; at once when one is due; not retryable when each is connected or named", () =>
    Effect.gen(function*() {
      const hosts = yield* make(expiring(undefined, new Set([session(1)])))
      const ids: Array<HostId> = []
      for (let i = 0; i < MAX_HOSTS; i++) ids.push((yield* hosts.register).host_id)
      for (const id of ids.slice(1)) yield* hosts.use(id, session(1))
      yield* TestClock.adjust(4_000)
      const waiting = yield* Effect.flip(hosts.register)
      expect(waiting._tag).toBe("Overloaded")
      expect(waiting).toMatchObject({ retryable: true, details: { reason: "max_hosts", retry_after_ms: EXPIRY_MS - 4_000 } })
      expect(waiting.message).toContain("BRAIN_HOST_IDLE_EXPIRY_SECS")
      expect(waiting.message).toContain("the next expires in 6 s")
      // Due, it makes room for the next registration without waiting for a sweep.
      yield* TestClock.adjust(EXPIRY_MS - 4_000)
      const next = yield* hosts.register
      expect(hosts.isRegistered(ids[0]!)).toBe(false)
      yield* hosts.connect(next.host_id)
      yield* TestClock.adjust(3 * EXPIRY_MS)
      const stuck = yield* Effect.flip(hosts.register)
      expect(stuck).toMatchObject({ _tag: "Overloaded", retryable: false, details: { reason: "max_hosts" } })
      expect(stuck.message).toContain("brain hosts remove")
      expect(stuck.message).toContain("none will expire by itself")
    }), 60_000)

  it.scoped("with expiry off (0) nothing expires, and the refusal at MAX_HOSTS is not retryable", () =>
    Effect.gen(function*() {
      const hosts = yield* make({ ...expiring(undefined), idleExpiryMs: 0 })
      const first = yield* hosts.register
      for (let i = 1; i < MAX_HOSTS; i++) yield* hosts.register
      yield* TestClock.adjust(3 * EXPIRY_MS)
      expect(yield* hosts.expire).toEqual([])
      expect(hosts.isRegistered(first.host_id)).toBe(true)
      const refused = yield* Effect.flip(hosts.register)
      expect(refused).toMatchObject({ _tag: "Overloaded", retryable: false })
      expect(refused.message).toContain("BRAIN_HOST_IDLE_EXPIRY_SECS is 0")
    }), 60_000)
})

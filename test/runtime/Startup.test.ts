/**
 * Startup opens no journal; sessions open on demand, once, and reads do not keep them
 * (DESIGN §6: "Startup does not open every journal: it must be O(1) in the number of stored
 * sessions"; "Recovery runs on the first access of any kind after a restart, reads included").
 *
 * The runtime is assembled over the file journal and the file checkpoint store with a file
 * driver that logs every call, so the tests can say exactly which files were opened and read.
 */
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Exit, Layer, Scope } from "effect"
import type { SessionId } from "../../src/domain/Ids.js"
import { entry, type JournalRecord } from "../../src/domain/Records.js"
import { sessionServices } from "../../src/Composition.js"
import * as AgentloopsModules from "../../src/layers/AgentloopsModules.js"
import * as CheckpointStore from "../../src/layers/CheckpointStore.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import * as ModelsScripted from "../../src/layers/ModelsScripted.js"
import { FORMAT, FORMAT_FILE, segmentName } from "../../src/layers/journal/DataDir.js"
import { FileDriver, type FileDriverShape, layerNode as nodeFiles } from "../../src/layers/journal/FileDriver.js"
import { Journal, type JournalShape } from "../../src/services/Journal.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"

/** Session directories laid out for the startup test. */
const STORED_SESSIONS = 10_000
/** Every this-many stored sessions has a garbage segment instead of an empty one. */
const CORRUPT_EVERY = 7
/** Concurrent first accesses of one cold session. */
const CONCURRENT_OPENS = 20

// ---------------------------------------------------------------------------------------------
// A file driver that logs what it touches

interface Call {
  readonly op: "open" | "read" | "readFile" | "readdir" | "size"
  readonly path: string
}

/** instrumentedDriver (support) extended to log opens and reads, with the path each concerns. */
const loggingDriver = () => {
  const inst = instrumentedDriver()
  const base = inst.driver
  const calls: Array<Call> = []
  const fdPaths = new Map<number, string>()
  const log = (op: Call["op"], p: string) => Effect.sync(() => void calls.push({ op, path: p }))
  const driver: FileDriverShape = {
    ...base,
    open: (p, flags) => Effect.zipRight(log("open", p), Effect.tap(base.open(p, flags), (fd) => Effect.sync(() => fdPaths.set(fd, p)))),
    read: (fd, buffer, position) => Effect.zipRight(log("read", fdPaths.get(fd) ?? `fd ${fd}`), base.read(fd, buffer, position)),
    size: (fd) => Effect.zipRight(log("size", fdPaths.get(fd) ?? `fd ${fd}`), base.size(fd)),
    readFile: (p) => Effect.zipRight(log("readFile", p), base.readFile(p)),
    readdir: (p) => Effect.zipRight(log("readdir", p), base.readdir(p))
  }
  return { driver, calls, counts: inst.counts }
}

/** The server's composition (src/Composition.ts) on files through `driver` (journal and checkpoints). */
const fileRuntime = (dataDir: string, driver: FileDriverShape) => {
  const files = Layer.succeed(FileDriver, driver)
  return sessionServices({
    config: ServerConfig.defaults,
    journal: JournalFile.layer({ dataDir, lockWaitMs: 0 }).pipe(Layer.provide(files)),
    checkpoints: CheckpointStore.layerFile(dataDir).pipe(Layer.provide(files)),
    base: Layer.empty,
    models: ModelsScripted.layer,
    wasm: Layer.empty,
    agentloops: AgentloopsModules.layer(),
    tools: {},
    beside: Layer.empty
  })
}

/** A fresh process's runtime: builds it with a logging driver, runs `use`, closes it. */
const withRuntime = <A, E>(
  dataDir: string,
  use: (services: { sessions: Context.Tag.Service<Sessions>; journal: JournalShape }) => Effect.Effect<A, E>
) =>
  Effect.gen(function*() {
    const logged = loggingDriver()
    const result = yield* Effect.gen(function*() {
      return yield* use({ sessions: yield* Sessions, journal: yield* Journal })
    }).pipe(Effect.provide(fileRuntime(dataDir, logged.driver)))
    return { result, calls: logged.calls }
  })

const underSessions = (dataDir: string, calls: ReadonlyArray<Call>) =>
  calls.filter((c) => path.resolve(c.path).startsWith(path.join(path.resolve(dataDir), "sessions")))

// ---------------------------------------------------------------------------------------------
// Stored sessions, laid out cheaply

const ALPHABET = "0123456789abcdefghjkmnpqrstvwxyz"
/** A valid session id: `ses_`, 18 filler characters, then `i` in 8 base-32 digits. */
const storedId = (i: number, filler = "0"): SessionId => {
  let tail = ""
  for (let n = i, k = 0; k < 8; k++, n = Math.floor(n / 32)) tail = ALPHABET[n % 32] + tail
  return `ses_${filler.repeat(18)}${tail}` as SessionId
}

/** A data directory holding `count` session directories, each with one empty or garbage segment. */
const layOut = (dataDir: string, count: number) => {
  fs.writeFileSync(path.join(dataDir, FORMAT_FILE), `${FORMAT}\n`)
  const garbage = Buffer.from("this is not a journal frame, it is garbage ".repeat(4))
  for (let i = 0; i < count; i++) {
    const dir = path.join(dataDir, "sessions", storedId(i), "journal")
    fs.mkdirSync(dir, { recursive: true })
    fs.writeFileSync(path.join(dir, segmentName(1)), i % CORRUPT_EVERY === 0 ? garbage : Buffer.alloc(0))
  }
}

/**
 * A temporary directory in memory when the machine has one: laying out 10,000 session
 * directories costs seconds of metadata writes on a busy disk and a fraction of a second in
 * tmpfs, and the driver's call log does not depend on which.
 */
const scratchDir = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      let parent = os.tmpdir()
      try {
        fs.accessSync("/dev/shm", fs.constants.W_OK)
        parent = "/dev/shm"
      } catch {
        // No writable tmpfs: use the ordinary temporary directory.
      }
      return fs.mkdtempSync(path.join(parent, prefix))
    }),
    (dir) => Effect.sync(() => fs.rmSync(dir, { recursive: true, force: true }))
  )

/** Builds the runtime layer (startup) and closes it; returns the driver's log. */
const startup = (dataDir: string) =>
  Effect.gen(function*() {
    const logged = loggingDriver()
    const scope = yield* Scope.make()
    yield* Layer.buildWithScope(fileRuntime(dataDir, logged.driver), scope)
    yield* Scope.close(scope, Exit.void)
    return { calls: logged.calls }
  })

/** The calls, each path relative to the data directory: two directories' startups compared call for call. */
const relativeTo = (dataDir: string, calls: ReadonlyArray<Call>) =>
  calls.map((c) => ({ op: c.op, path: path.relative(path.resolve(dataDir), path.resolve(c.path)) }))

const readAll = (journal: JournalShape, session: SessionId) =>
  Effect.gen(function*() {
    const out: Array<JournalRecord> = []
    for (;;) {
      const page = yield* journal.read(session, { after: out.length, limit: 1000 })
      if (page.length === 0) return out
      out.push(...page)
    }
  })

/** A session with a little history: created, two echo turns. */
const sessionWithHistory = (dataDir: string) =>
  Effect.map(
    withRuntime(dataDir, ({ sessions }) =>
      Effect.gen(function*() {
        const { session_id } = yield* sessions.create({ model: { provider: "scripted" } })
        yield* sessions.send(session_id, { message: "one" })
        yield* sessions.send(session_id, { message: "two" })
        return session_id
      })),
    (r) => r.result
  )

/** A session as a process killed mid-turn leaves it: a turn, its activation, a model call and a tool call open. */
const crashedSession = (dataDir: string, session: SessionId) =>
  Effect.scoped(Effect.gen(function*() {
    const journal = yield* JournalFile.make({ dataDir, lockWaitMs: 0 }).pipe(Effect.provide(nodeFiles))
    yield* journal.create(session)
    const append = (...entries: Parameters<typeof entry>[]) => journal.append(session, entries.map(([k, p]) => entry(k, p as never)))
    yield* append(["session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" }, tools: [{ name: "t" }] } }])
    yield* append(["session_creation_ended", { sequence: 1 }])
    yield* append(["turn_started", { input: { message: "go" }, mode: "send" }], ["activation_started", { agentloop: "official" }])
    yield* append(["model_call_started", { message_count: 1, context: { through_sequence: 0, delta: { keep: 0, append: [{ role: "user", content: "go" }] } } }])
    yield* append(["model_call_ended", { sequence: 5, result: { text: "", tool_calls: [{ id: "c1", name: "t", input: {} }], stop_reason: "tool_calls" } }])
    yield* append(["model_call_started", { message_count: 2, context: { through_sequence: 0, delta: { keep: 0, append: [{ role: "user", content: "go" }] } } }])
    yield* append(["tool_call_started", { tool: "t", call_id: "c1", input: {}, deadline_at_ms: 0 }])
    return yield* journal.lastSequence(session)
  }))

// ---------------------------------------------------------------------------------------------

describe("startup and opening sessions on demand (file journal)", () => {
  it.scopedLive(`startup over ${STORED_SESSIONS} stored sessions (some corrupt) opens and reads no journal: it makes the very calls it makes over none`, () =>
    Effect.gen(function*() {
      const empty = yield* scratchDir("brain-startup-empty-")
      const full = yield* scratchDir("brain-startup-full-")
      fs.writeFileSync(path.join(empty, FORMAT_FILE), `${FORMAT}\n`)
      layOut(full, STORED_SESSIONS)

      const none = yield* startup(empty)
      const many = yield* startup(full)

      // The real assertion: startup touches nothing under sessions/ — no listing, no open, no read.
      expect(underSessions(full, many.calls)).toEqual([])
      // Besides the commit log's two files, read once at start (bounded, whatever the sessions).
      const commitLog = path.join(path.resolve(full), "commit-log")
      expect(many.calls.filter((c) => c.op !== "readdir" && path.dirname(path.resolve(c.path)) !== commitLog)).toEqual([])
      // And its work does not grow with the number of sessions: not a call more than over none
      // (what it costs is what it calls, so this says it without a stopwatch).
      expect(relativeTo(full, many.calls)).toEqual(relativeTo(empty, none.calls))

      // The stored sessions are still there, each judged on its own when first accessed.
      const { result } = yield* withRuntime(full, ({ sessions }) =>
        Effect.gen(function*() {
          const corrupt = yield* Effect.flip(sessions.get(storedId(0)))
          const blank = yield* Effect.flip(sessions.get(storedId(1)))
          const created = yield* sessions.create({ model: { provider: "scripted" } })
          const turn = yield* sessions.send(created.session_id, { message: "still works" })
          return { corrupt: corrupt.code, blank: blank.code, turn: turn.turn.status }
        }))
      expect(result).toEqual({ corrupt: "journal_corrupt", blank: "not_found", turn: "ended" })
    }), 60_000)

  it.scopedLive(`${CONCURRENT_OPENS} concurrent first accesses of a cold session share one open: its segment is read as often as by one access`, () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-startup-open-")
      const session = yield* sessionWithHistory(dir)
      const segment = path.join(dir, "sessions", session, "journal", segmentName(1))
      const onSegment = (calls: ReadonlyArray<Call>) => ({
        readFile: calls.filter((c) => c.op === "readFile" && c.path === segment).length,
        open: calls.filter((c) => c.op === "open" && c.path === segment).length,
        read: calls.filter((c) => c.op === "read" && c.path === segment).length
      })

      const one = yield* withRuntime(dir, ({ sessions }) => sessions.get(session))
      const many = yield* withRuntime(dir, ({ sessions }) =>
        Effect.gen(function*() {
          const all = yield* Effect.all(Array.from({ length: CONCURRENT_OPENS }, () => sessions.get(session)), { concurrency: "unbounded" })
          return { all, warm: yield* sessions.warm }
        }))

      expect(onSegment(one.calls).readFile, "opening the journal reads its segment whole once").toBe(1)
      expect(onSegment(many.calls)).toEqual(onSegment(one.calls))
      expect(many.calls.length, "checkpoint and directory reads are shared too").toBe(one.calls.length)
      expect(new Set(many.result.all.map((s) => JSON.stringify(s))).size).toBe(1)
      expect(many.result.all[0]).toMatchObject({ session_id: session, status: "idle" })
      expect(many.result.warm).toBe(0)
    }), 60_000)

  it.scopedLive("reads (summary, transcript, Events) of a cold session leave no actor warm", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir("brain-startup-reads-")
      const session = yield* sessionWithHistory(dir)
      const { result } = yield* withRuntime(dir, ({ sessions }) =>
        Effect.gen(function*() {
          const warm: Record<string, number> = { startup: yield* sessions.warm }
          const summary = yield* sessions.get(session)
          warm.get = yield* sessions.warm
          const transcript = yield* sessions.transcript(session)
          warm.transcript = yield* sessions.warm
          const page = yield* sessions.events(session, { after: 0, limit: 100 })
          warm.events = yield* sessions.warm
          return { warm, summary, transcript, kinds: page.events.map((e) => e.kind) }
        }))
      expect(result.warm).toEqual({ startup: 0, get: 0, transcript: 0, events: 0 })
      expect(result.summary.status).toBe("idle")
      expect(result.transcript.messages.map((m) => m.content)).toEqual(["one", "one", "two", "two"])
      expect(result.kinds.filter((k) => k === "turn_ended")).toHaveLength(2)
    }), 60_000)

  for (const read of ["get", "transcript", "events"] as const) {
    it.scopedLive(`the first ${read} after a crash records the recovery (durably, once) and still leaves no actor warm`, () =>
      Effect.gen(function*() {
        const dir = yield* tempDir("brain-startup-recover-")
        const session = storedId(1, "r")
        const crashedAt = yield* crashedSession(dir, session)

        const first = yield* withRuntime(dir, ({ journal, sessions }) =>
          Effect.gen(function*() {
            const answer = read === "get"
              ? yield* sessions.get(session)
              : read === "transcript"
              ? yield* sessions.transcript(session)
              : yield* sessions.events(session, { after: 0, limit: 100 })
            const warm = yield* sessions.warm
            const afterFirst = (yield* readAll(journal, session)).length
            yield* sessions.get(session)
            const afterSecond = (yield* readAll(journal, session)).length
            return { answer, warm, afterFirst, afterSecond }
          }))
        const recovery = yield* withRuntime(dir, ({ journal, sessions }) =>
          Effect.gen(function*() {
            const summary = yield* sessions.get(session)
            return { summary, records: yield* readAll(journal, session) }
          }))

        expect(first.result.warm).toBe(0)
        expect(first.result.afterSecond, "a second access in the same process writes nothing more").toBe(first.result.afterFirst)
        const records = recovery.result.records
        expect(records.length, "a restart after recovery writes nothing more").toBe(first.result.afterFirst)
        expect(records.slice(crashedAt)).toMatchObject([
          { kind: "model_call_failed", payload: { sequence: 7, failure: { ambiguous: true } } },
          { kind: "tool_call_failed", payload: { sequence: 8, outcome: "unknown", is_error: true, failure: { ambiguous: true } } },
          { kind: "activation_failed", payload: { sequence: 4, failure: { code: "interrupted" } } },
          { kind: "turn_failed", payload: { sequence: 3, failure: { code: "interrupted" } } }
        ])
        expect(recovery.result.summary).toMatchObject({ status: "idle", last_sequence: crashedAt + 4 })
        if (read === "events") {
          const kinds = (first.result.answer as { events: ReadonlyArray<{ kind: string }> }).events.map((e) => e.kind)
          expect(kinds.slice(-4), "the page read after recovery includes its records").toEqual([
            "model_call_failed",
            "tool_call_failed",
            "activation_failed",
            "turn_failed"
          ])
        }
      }), 60_000)
  }
})

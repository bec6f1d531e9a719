/**
 * A crash between an Environment step's `*_started` and its outcome: the journal is written up to
 * the started record (what a process killed while the request was in flight leaves), then a new
 * runtime opens the data directory. The first access records the step failed, ambiguous, and
 * closes what was open (a creation fails, an ending ends); nothing is sent: the fake Environment
 * logs no request. A later delete tears down with a new operation.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import type { AdmittedEnvironment } from "../../src/domain/Environment.js"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { entry, type Entry } from "../../src/domain/Records.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { bindingsOf, type Fake, fakeEnvironment } from "../support/httpEnvironment.js"
import { tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

const admitted = (url: string): AdmittedEnvironment => ({
  name: "sandbox",
  driver: "http",
  binding: "sandboxes",
  resolved: { base_url: url, lifecycle_timeout_ms: 60_000 }
})

/** Writes a session's journal as a killed process left it, in a runtime of its own (it holds the lock). */
const crashedSession = (dataDir: string, records: (env: AdmittedEnvironment) => ReadonlyArray<Entry>, url: string) =>
  Effect.scoped(Effect.gen(function*() {
    const journal = yield* Journal
    const id = yield* mintSessionId
    yield* journal.create(id)
    yield* journal.append(id, records(admitted(url)))
    return id
  }).pipe(Effect.provide(JournalFile.layerNode({ dataDir }))))

const created = (env: AdmittedEnvironment): Array<Entry> => [
  entry("session_creation_started", { configuration: { agentloop: "official", model: { provider: "scripted" }, environments: [env] } }),
  entry("environment_setup_started", { environment: "sandbox", request: { options: {} } })
]
const createdAndSetUp = (env: AdmittedEnvironment): Array<Entry> => [
  ...created(env),
  entry("environment_setup_ended", { sequence: 2, result: null }),
  entry("session_creation_ended", { sequence: 1 })
]

const reopened = (dataDir: string, f: Fake) => runtimeLayer({ journal: { dataDir }, environments: { bindings: bindingsOf({ sandboxes: f.url }) } })

const eventsOf = (id: SessionId) =>
  Effect.map(Effect.flatMap(Sessions, (s) => s.events(id, { after: 0, limit: 1000 })), (p) => p.events)

/** As every Environment failure, it names the Environment (docs/environments.md). */
const interrupted = { code: "interrupted", ambiguous: true, details: { environment: "sandbox" } }

describe("recovery of an Environment step left open by a crash", () => {
  it.scopedLive("a setup in flight: the creation fails, the setup is recorded ambiguous and not resent; a delete then tears down", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const f = yield* fakeEnvironment()
      const id = yield* crashedSession(dir, created, f.url)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        expect((yield* sessions.get(id)).status).toBe("failed")
        const tail = (yield* eventsOf(id)).slice(2)
        expect(tail.map((e) => [e.kind, (e.data as any).sequence])).toEqual([["environment_setup_failed", 2], ["session_creation_failed", 1]])
        expect(tail[0]!.data).toMatchObject({ failure: interrupted })
        // The creation names the Environment it was setting up, as a stop's record of it does.
        expect(tail[1]!.data).toMatchObject({ failure: interrupted })
        expect(f.requests()).toEqual([])
        yield* sessions.delete(id)
        expect(f.requests()).toMatchObject([{ path: "/teardown", session_id: id, sequence: 5, count: 1 }])
      }).pipe(Effect.provide(reopened(dir, f)))
    }))

  it.scopedLive("a detach in flight: the session ends, the detach is recorded ambiguous and not resent", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const f = yield* fakeEnvironment()
      const id = yield* crashedSession(dir, (env) => [
        ...createdAndSetUp(env),
        entry("session_end_started", {}),
        entry("environment_detach_started", { environment: "sandbox" })
      ], f.url)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        expect((yield* sessions.get(id)).status).toBe("ended")
        const tail = (yield* eventsOf(id)).slice(6)
        expect(tail.map((e) => [e.kind, (e.data as any).sequence])).toEqual([["environment_detach_failed", 6], ["session_ended", 5]])
        expect(tail[0]!.data).toMatchObject({ failure: interrupted })
        expect(f.requests()).toEqual([])
      }).pipe(Effect.provide(reopened(dir, f)))
    }))

  it.scopedLive("a tool call in flight in an Environment: recorded unknown, ambiguous, naming the Environment, and not resent", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const f = yield* fakeEnvironment()
      const id = yield* crashedSession(dir, (env) => [
        entry("session_creation_started", {
          configuration: {
            agentloop: "official",
            model: { provider: "scripted" },
            environments: [env],
            tools: [{ name: "run", environment: "sandbox" }, { name: "local" }]
          }
        }),
        entry("environment_setup_started", { environment: "sandbox", request: { options: {} } }),
        entry("environment_setup_ended", { sequence: 2, result: null }),
        entry("session_creation_ended", { sequence: 1 }),
        entry("tool_call_started", { tool: "run", call_id: "call_1", input: {}, deadline_at_ms: 0 }),
        entry("tool_call_started", { tool: "local", call_id: "call_2", input: {}, deadline_at_ms: 0 })
      ], f.url)
      yield* Effect.gen(function*() {
        const failed = (yield* eventsOf(id)).filter((e) => e.kind === "tool_call_failed")
        expect(failed.map((e) => (e.data as any).sequence)).toEqual([5, 6])
        expect(failed[0]!.data).toMatchObject({ outcome: "unknown", failure: { code: "unknown", ambiguous: true, details: { environment: "sandbox" } } })
        // A tool that runs in no Environment has none to name.
        expect((failed[1]!.data as any).failure.details).toBeUndefined()
        expect(f.requests()).toEqual([])
      }).pipe(Effect.provide(reopened(dir, f)))
    }))

  it.scopedLive("a teardown in flight: recorded ambiguous and not resent; only a new delete sends a new teardown", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const f = yield* fakeEnvironment()
      const id = yield* crashedSession(dir, (env) => [
        ...createdAndSetUp(env),
        entry("session_end_started", {}),
        entry("session_ended", { sequence: 5 }),
        entry("environment_teardown_started", { environment: "sandbox" })
      ], f.url)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        expect((yield* sessions.get(id)).status).toBe("ended")
        const last = (yield* eventsOf(id)).at(-1)!
        expect(last).toMatchObject({ kind: "environment_teardown_failed", data: { sequence: 7, failure: interrupted } })
        yield* Effect.sleep("100 millis")
        expect(f.requests()).toEqual([])
        yield* sessions.delete(id)
        expect(f.requests()).toMatchObject([{ path: "/teardown", session_id: id, sequence: 9, count: 1 }])
      }).pipe(Effect.provide(reopened(dir, f)))
    }))
})

/**
 * What a creation cut off by a crash leaves in the data directory (FileStore.ts `create`: the
 * session's directory, its `journal/`, an empty first segment, made one after another, and the
 * creator's first record next) is debris: no client was given its id (a create answers after that
 * record is durable). A list or an access that meets it answers as if it were not there (not
 * listed, 404 not_found) and removes it, its parent directory fsynced; never at startup (a start
 * reads no session, test/runtime/Startup.test.ts), and never a directory that holds a record, a
 * file the journal does not know, or a session a request of this process is creating.
 *
 * A delete leaves no such debris: it renames the session's directory to a tombstone in one step,
 * so a crash leaves the session whole or its tombstone, which the next start removes
 * (test/layers/JournalDelete.test.ts); the case below checks the sessions directory after one.
 * The states are made by hand as a crash leaves them; test/e2e/createDebris.test.ts makes them
 * with a real kill -9.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Either, Fiber, Layer } from "effect"
import * as fs from "node:fs"
import * as path from "node:path"
import { mintSessionId, type SessionId } from "../../src/domain/Ids.js"
import { encodeFrame } from "../../src/layers/journal/Frame.js"
import { segmentName } from "../../src/layers/journal/DataDir.js"
import * as JournalFile from "../../src/layers/JournalFile.js"
import { FileDriver } from "../../src/layers/journal/FileDriver.js"
import * as AgentloopsModules from "../../src/layers/AgentloopsModules.js"
import { memoryStore } from "../../src/layers/agentloops/ModuleStore.js"
import { Journal } from "../../src/services/Journal.js"
import { Sessions } from "../../src/services/Sessions.js"
import { instrumentedDriver, tempDir } from "../support/journals.js"
import { runtimeLayer } from "../support/runtime.js"

const sessionsDir = (dataDir: string) => path.join(dataDir, "sessions")
const dirOf = (dataDir: string, id: string) => path.join(sessionsDir(dataDir), id)
const journalOf = (dataDir: string, id: string) => path.join(dirOf(dataDir, id), "journal")

/** Every state a creation cut off by a crash can leave, laid out by hand. */
const layOutDebris = (dataDir: string) =>
  Effect.gen(function*() {
    const debris = {
      directoryOnly: yield* mintSessionId,
      journalWithoutSegment: yield* mintSessionId,
      emptySegment: yield* mintSessionId,
      // A first write torn by a power loss: the open truncates it to nothing.
      tornFirstWrite: yield* mintSessionId
    }
    fs.mkdirSync(dirOf(dataDir, debris.directoryOnly), { recursive: true })
    fs.mkdirSync(journalOf(dataDir, debris.journalWithoutSegment), { recursive: true })
    fs.mkdirSync(journalOf(dataDir, debris.emptySegment), { recursive: true })
    fs.writeFileSync(path.join(journalOf(dataDir, debris.emptySegment), segmentName(1)), "")
    fs.mkdirSync(journalOf(dataDir, debris.tornFirstWrite), { recursive: true })
    const [head, body] = encodeFrame(1, 1, Buffer.from("session_creation_started"), Buffer.from("{\"configuration\":{}}"), false)
    fs.writeFileSync(path.join(journalOf(dataDir, debris.tornFirstWrite), segmentName(1)), Buffer.concat([head, body]).subarray(0, head.length + 3))
    return debris
  })

/** A runtime over the file journal whose driver records the directories it fsyncs. */
const syncedRuntime = (dataDir: string) => {
  const probe = instrumentedDriver()
  const synced: Array<string> = []
  const driver = { ...probe.driver, syncDir: (p: string) => Effect.zipRight(probe.driver.syncDir(p), Effect.sync(() => void synced.push(path.resolve(p)))) }
  const journal = Layer.scoped(Journal, Effect.orDie(JournalFile.make({ dataDir }))).pipe(Layer.provide(Layer.succeed(FileDriver, driver)))
  return { layer: runtimeLayer({ journal }), synced }
}

const createWhole = (dataDir: string) =>
  Effect.gen(function*() {
    return (yield* (yield* Sessions).create({ model: { provider: "scripted" } })).session_id
  }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))

describe("what a creation cut off by a crash leaves", () => {
  it.scopedLive("a list meets it: not listed, removed, the sessions directory fsynced; a whole session beside it untouched", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const whole = yield* createWhole(dataDir)
      const debris = yield* layOutDebris(dataDir)
      const { layer, synced } = syncedRuntime(dataDir)
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        // The start read none of it.
        expect(fs.readdirSync(sessionsDir(dataDir)).sort()).toEqual([whole, ...Object.values(debris)].sort())
        const listed = (yield* sessions.list({ limit: 100 })).sessions.map((s) => s.session_id)
        expect(listed).toEqual([whole])
        expect(fs.readdirSync(sessionsDir(dataDir))).toEqual([whole])
        expect(synced).toContain(path.resolve(sessionsDir(dataDir)))
        // Listed again: the same, with nothing left to remove.
        expect((yield* sessions.list({ limit: 100 })).sessions.map((s) => s.session_id)).toEqual([whole])
        expect((yield* sessions.send(whole, { message: "still works" })).turn.status).toBe("ended")
      }).pipe(Effect.provide(layer))
    }))

  it.scopedLive("an access meets it: a get, a transcript, a send and a delete each answer not_found, and it is removed", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const whole = yield* createWhole(dataDir)
      const accesses = ["get", "transcript", "send", "delete"] as const
      for (const access of accesses) {
        const debris = yield* layOutDebris(dataDir)
        yield* Effect.gen(function*() {
          const sessions = yield* Sessions
          for (const [state, id] of Object.entries(debris)) {
            const answer = yield* Effect.either<void, { readonly _tag: string }, never>(
              access === "get"
                ? Effect.asVoid(sessions.get(id))
                : access === "transcript"
                ? Effect.asVoid(sessions.transcript(id))
                : access === "send"
                ? Effect.asVoid(sessions.send(id, { message: "hello" }))
                : sessions.delete(id)
            )
            expect(Either.isLeft(answer) && answer.left._tag, `${access} of ${state}`).toBe("NotFound")
            expect(fs.existsSync(dirOf(dataDir, id)), `${access} of ${state} left its directory`).toBe(false)
          }
        }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
      }
      expect(fs.readdirSync(sessionsDir(dataDir))).toEqual([whole])
    }))

  it.scopedLive("a directory that holds a record, a file the journal does not know, or damage is never removed", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const whole = yield* createWhole(dataDir)
      const kept = {
        unknownFile: yield* mintSessionId,
        unknownInJournal: yield* mintSessionId,
        garbageSegment: yield* mintSessionId
      }
      fs.mkdirSync(journalOf(dataDir, kept.unknownFile), { recursive: true })
      fs.writeFileSync(path.join(dirOf(dataDir, kept.unknownFile), "notes.txt"), "an operator's")
      fs.mkdirSync(journalOf(dataDir, kept.unknownInJournal), { recursive: true })
      fs.writeFileSync(path.join(journalOf(dataDir, kept.unknownInJournal), segmentName(1)), "")
      fs.writeFileSync(path.join(journalOf(dataDir, kept.unknownInJournal), "README"), "")
      fs.mkdirSync(journalOf(dataDir, kept.garbageSegment), { recursive: true })
      fs.writeFileSync(path.join(journalOf(dataDir, kept.garbageSegment), segmentName(1)), "this is not a journal frame ".repeat(8))
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const listed = (yield* sessions.list({ limit: 100 })).sessions
        expect(listed.map((s) => s.session_id)).toEqual([whole, kept.garbageSegment].sort())
        expect(listed.find((s) => s.session_id === kept.garbageSegment)?.status).toBe("corrupt")
        for (const id of [kept.unknownFile, kept.unknownInJournal]) {
          const got = yield* Effect.either(sessions.get(id))
          expect(Either.isLeft(got) && got.left._tag, id).toBe("NotFound")
        }
        expect((yield* sessions.get(whole)).status).toBe("idle")
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
      expect(fs.readdirSync(sessionsDir(dataDir)).sort()).toEqual([whole, ...Object.values(kept)].sort())
    }))

  it.scopedLive("a session a request of this process is creating is never removed, however it is met before its first record", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const gate = yield* Deferred.make<void>()
      const reached = yield* Deferred.make<SessionId>()
      // The creation is held between its journal's creation and its first record: its modules' uses.
      const layer = runtimeLayer({
        journal: { dataDir },
        agentloops: (loops) => ({
          ...loops,
          use: (id, session) => Effect.zipRight(Effect.zipRight(Deferred.succeed(reached, session as SessionId), Deferred.await(gate)), loops.use(id, session))
        })
      })
      yield* Effect.gen(function*() {
        const sessions = yield* Sessions
        const journal = yield* Journal
        const creating = yield* Effect.fork(sessions.create({ model: { provider: "scripted" } }))
        const id = yield* Deferred.await(reached)
        expect(fs.readdirSync(journalOf(dataDir, id))).toEqual([segmentName(1)])
        // Met meanwhile: by a list, a read, a send, and the check a module's removal makes.
        expect((yield* sessions.list({ limit: 100 })).sessions).toEqual([])
        const got = yield* Effect.either(sessions.get(id))
        expect(Either.isLeft(got) && got.left._tag).toBe("NotFound")
        const sent = yield* Effect.either(sessions.send(id, { message: "early" }))
        expect(Either.isLeft(sent) && sent.left._tag).toBe("NotFound")
        expect(yield* journal.exists(id)).toBe(true)
        expect(fs.existsSync(journalOf(dataDir, id))).toBe(true)
        yield* Deferred.succeed(gate, undefined)
        const created = yield* Fiber.join(creating)
        expect(created).toMatchObject({ session_id: id, status: "idle" })
        expect((yield* sessions.send(id, { message: "hello" })).turn.status).toBe("ended")
        expect((yield* sessions.list({ limit: 100 })).sessions.map((s) => s.session_id)).toEqual([id])
      }).pipe(Effect.provide(layer))
    }))

  it.scopedLive("the journal's exists says no for it, so a module's or a host's use recorded by it names no session; yes for a whole session", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const whole = yield* createWhole(dataDir)
      const debris = yield* layOutDebris(dataDir)
      yield* Effect.gen(function*() {
        const journal = yield* Journal
        expect(yield* journal.exists(whole)).toBe(true)
        // The torn write is debris only once an open has truncated it: until then its bytes count.
        const { tornFirstWrite, ...unopened } = debris
        for (const [state, id] of Object.entries(unopened)) expect(yield* journal.exists(id), state).toBe(false)
        expect(yield* journal.exists(tornFirstWrite)).toBe(true)
        // Checking removes nothing: an access does.
        expect(fs.readdirSync(sessionsDir(dataDir)).length).toBe(5)
      }).pipe(Effect.provide(runtimeLayer({ journal: { dataDir } })))
    }))

  it.scopedLive("a module whose use was recorded by a creation a crash cut off can be removed; one a whole session uses cannot", () =>
    Effect.gen(function*() {
      const dataDir = yield* tempDir()
      const whole = yield* createWhole(dataDir)
      const { directoryOnly, emptySegment } = yield* layOutDebris(dataDir)
      const store = memoryStore()
      const [cutOff, used] = ["a", "b"].map((c) => c.repeat(64))
      for (const id of [cutOff!, used!]) yield* Effect.orDie(store.write(id, new Uint8Array([0])))
      yield* Effect.orDie(store.use(cutOff!, directoryOnly))
      yield* Effect.orDie(store.use(cutOff!, emptySegment))
      yield* Effect.orDie(store.use(used!, whole))
      yield* Effect.gen(function*() {
        const loops = yield* AgentloopsModules.make({ store })
        yield* loops.remove(cutOff!)
        expect(yield* Effect.orDie(store.has(cutOff!))).toBe(false)
        const refused = yield* Effect.flip(loops.remove(used!))
        expect(refused._tag).toBe("AgentloopInUse")
      }).pipe(Effect.provide(JournalFile.layerNode({ dataDir })))
    }))
})

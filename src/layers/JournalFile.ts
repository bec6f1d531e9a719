/**
 * The on-disk Journal (embedded default): segment files under
 * `{dataDir}/sessions/{id}/journal/`, group-committed by one writer per process.
 * A session's journal is opened (validated, torn tail truncated) on its first access, and
 * concurrent first accesses share one open. A damaged session is refused on its own.
 */
import * as path from "node:path"
import { Deferred, Effect, Exit, FiberId, Layer, Scope } from "effect"
import { isSessionId, type SessionId } from "../domain/Ids.js"
import { OPEN_JOURNAL_HANDLES } from "../domain/Limits.js"
import {
  Journal,
  JournalWriteFailed,
  type JournalAppendError,
  type JournalReadError,
  type JournalShape,
  SessionAlreadyExists,
  SessionNotFound
} from "../services/Journal.js"
import { journalDir, openDataDir, SESSIONS_DIR, segmentName, sessionDir } from "./journal/DataDir.js"
import { prepareEntries } from "./journal/Encode.js"
import { FileDriver, type FileDriverShape, nodeDriver } from "./journal/FileDriver.js"
import { openHandle, readRecords, type SessionHandle } from "./journal/Handle.js"
import { Subscribers } from "./journal/Subscribers.js"
import { defaultWriterLimits, HANDLE_EVICTED, Writer, type WriterLimits } from "./journal/Writer.js"

export interface JournalFileOptions {
  readonly dataDir: string
  /** How long to wait for a data-directory lock held by a live (perhaps exiting) process. */
  readonly lockWaitMs?: number
  readonly limits?: Partial<WriterLimits>
  /** Opened journals kept in memory (default OPEN_JOURNAL_HANDLES). */
  readonly maxHandles?: number
}

export const make = (options: JournalFileOptions): Effect.Effect<JournalShape, import("./journal/DataDir.js").DataDirError, FileDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const driver: FileDriverShape = yield* FileDriver
    const dataDir = path.resolve(options.dataDir)
    yield* openDataDir(dataDir, options.lockWaitMs)
    const hub = new Subscribers()
    const writer = new Writer(driver, hub, { ...defaultWriterLimits, ...options.limits })
    const handles = new Map<string, Deferred.Deferred<SessionHandle, JournalReadError>>()
    const maxHandles = options.maxHandles ?? OPEN_JOURNAL_HANDLES
    const creating = new Set<string>()
    /** Sessions being deleted: no new open may start, so nothing of them lingers in memory. */
    const removing = new Set<string>()

    // Close order: refuse new appends, let the loop drain what was queued, then close files.
    yield* Effect.addFinalizer(() => writer.closeFiles)
    const loop = yield* Effect.forkScoped(writer.run)
    yield* Effect.addFinalizer(() => Effect.zipRight(writer.close, loop.await))

    /** Opened handles, for a lookup without waiting on the shared open; least recently used first. */
    const ready = new Map<string, Effect.Effect<SessionHandle>>()
    const opens = new Map<string, SessionHandle>()
    /** Past OPEN_JOURNAL_HANDLES, drops the least recently used handles with no append in flight. */
    const dropIdleHandles = Effect.suspend(() => {
      if (ready.size <= maxHandles) return Effect.void
      const victims: Array<SessionHandle> = []
      for (const session of ready.keys()) {
        if (ready.size - victims.length <= maxHandles) break
        const h = opens.get(session)
        if (h && h.inflight === 0) victims.push(h)
      }
      for (const h of victims) {
        h.evicted = true
        ready.delete(h.session)
        opens.delete(h.session)
        handles.delete(h.session)
      }
      return Effect.forEach(victims, (h) => writer.forget(h), { discard: true })
    })
    const drop = (session: string) => {
      handles.delete(session)
      ready.delete(session)
      opens.delete(session)
    }
    const handleOf = (session: SessionId): Effect.Effect<SessionHandle, JournalReadError> =>
      Effect.suspend(() => {
        if (removing.has(session)) return Effect.fail(new SessionNotFound({ session }))
        const known = ready.get(session)
        if (known) {
          // Most recently used last, so the oldest idle handles are dropped first.
          ready.delete(session)
          ready.set(session, known)
          return known
        }
        const existing = handles.get(session)
        if (existing) return Deferred.await(existing)
        const opened = Deferred.unsafeMake<SessionHandle, JournalReadError>(FiberId.none)
        handles.set(session, opened)
        return openHandle(driver, dataDir, session, true).pipe(
          Effect.map((o) => o.handle),
          Effect.exit,
          Effect.tap((exit) => {
            if (Exit.isFailure(exit)) handles.delete(session)
            else {
              ready.set(session, Effect.succeed(exit.value))
              opens.set(session, exit.value)
            }
            return Effect.zipRight(Deferred.done(opened, exit), dropIdleHandles)
          }),
          // One caller going away must not abandon an open others are waiting on.
          Effect.uninterruptible,
          Effect.zipRight(Deferred.await(opened))
        )
      })

    const journal: JournalShape = {
      create: (session) =>
        Effect.gen(function*() {
          const dir = sessionDir(dataDir, session)
          if (creating.has(session) || handles.has(session) || (yield* driver.exists(dir))) {
            return yield* Effect.fail(new SessionAlreadyExists({ session }))
          }
          creating.add(session)
          const jdir = journalDir(dataDir, session)
          yield* Effect.gen(function*() {
            yield* driver.mkdir(jdir)
            const fd = yield* driver.open(path.join(jdir, segmentName(1)), "wx")
            yield* driver.close(fd)
            yield* driver.syncDir(jdir)
            yield* driver.syncDir(dir)
            yield* driver.syncDir(path.join(dataDir, SESSIONS_DIR))
          }).pipe(
            Effect.mapError((e) => new JournalWriteFailed({ session, reason: e.reason })),
            Effect.ensuring(Effect.sync(() => creating.delete(session)))
          )
        }),
      exists: (session) => driver.exists(journalDir(dataDir, session)),
      list: driver.readdir(path.join(dataDir, SESSIONS_DIR)).pipe(
        Effect.map((names) => names.filter(isSessionId) as Array<SessionId>),
        Effect.orElseSucceed(() => [] as Array<SessionId>)
      ),
      append: (session, entries, opts) =>
        Effect.flatMap(prepareEntries(entries), (prepared) => {
          const attempt: Effect.Effect<ReadonlyArray<number>, JournalAppendError> = Effect.flatMap(
            handleOf(session),
            (handle) =>
              writer.append(handle, prepared, opts?.lane ?? "latency").pipe(
                // The handle was dropped from memory between lookup and queueing: use a fresh one.
                Effect.catchIf((e) => e === HANDLE_EVICTED, () => attempt)
              )
          )
          return attempt
        }),
      read: (session, { after, limit, maxBytes }) =>
        Effect.flatMap(handleOf(session), (handle) => readRecords(driver, handle, after, limit, maxBytes)),
      remove: (session) =>
        Effect.gen(function*() {
          if (removing.has(session)) return yield* Effect.fail(new SessionNotFound({ session }))
          const dir = sessionDir(dataDir, session)
          if (!(yield* driver.exists(dir))) return yield* Effect.fail(new SessionNotFound({ session }))
          // From here no open starts; one already under way is awaited below and then dropped.
          removing.add(session)
          const opened = handles.get(session)
          drop(session)
          if (opened) {
            const handle = yield* Effect.option(Deferred.await(opened))
            if (handle._tag === "Some") {
              handle.value.broken = new JournalWriteFailed({ session, reason: "the session was deleted" })
              yield* writer.release(handle.value)
            }
          }
          yield* driver.rmrf(dir).pipe(
            Effect.zipRight(driver.syncDir(path.join(dataDir, SESSIONS_DIR))),
            Effect.mapError((e) => new JournalWriteFailed({ session, reason: e.reason })),
            // Gone (or not): later opens find out from the files themselves.
            Effect.ensuring(Effect.sync(() => removing.delete(session)))
          )
        }).pipe(Effect.uninterruptible),
      reset: (session) =>
        Effect.suspend(() => {
          const handle = opens.get(session)
          if (!handle || !handle.broken) return Effect.void
          // Appends still queued on it are refused by the writer: it is broken.
          drop(session)
          return writer.forget(handle)
        }),
      lastSequence: (session) => Effect.map(handleOf(session), (h) => h.lastSequence),
      subscribe: (session) => Effect.flatMap(handleOf(session), (h) => hub.subscribe(session, h.lastSequence))
    }
    return journal
  })

/** The file journal over a data directory, with the given file driver. */
export const layer = (options: JournalFileOptions) => Layer.scoped(Journal, make(options))

/** The file journal on Node's file system: the embedded default. */
export const layerNode = (options: JournalFileOptions) =>
  layer(options).pipe(Layer.provide(Layer.succeed(FileDriver, nodeDriver)))

/**
 * The file store (the embedded default): segment files under `{dataDir}/sessions/{id}/journal/`
 * (docs/journal.md). A round writes each touched session's frames with one vectored write at the
 * end of its final segment (rotating to a new segment first when this one would pass
 * SEGMENT_ROTATE_BYTES), all touched files through one `syncMany`, and makes the round durable with
 * one batch in the commit log (CommitLog.ts), written at once with the segment writes in a small
 * round (FileDriver.ts); without the log (`commitLogBytes: 0`) each segment is
 * opened with `O_DSYNC` so that its own write returns once it is durable (FileDriver.ts,
 * SEGMENT_FLAGS: no fdatasync follows it).
 * Write descriptors are kept open for the next round, at most OPEN_JOURNAL_FILES, least recently
 * written closed first (synced first when the commit log needs it), and never closed under a
 * write in flight.
 *
 * A failed write: part or all of it may have landed (a disk that fills up in the middle of a
 * write, an `O_DSYNC` write whose data landed and whose sync failed, a round whose segment writes
 * landed and whose commit-log batch failed, a round whose batch landed and one of whose segment
 * writes failed). Before it is answered, what landed is taken back: its frames out of the commit
 * log (the driver writes the batch of the other writes in the failed batch's place, FileDriver.ts
 * `syncMany`; a batch reported failed is erased, CommitLog.ts `erased`), then the segment cut back
 * (ftruncate) to where the write began and synced. So a write reported failed
 * is never read back later, by a reopen or after a crash: no frame of it stays in the segment for
 * the open's scan to take (a whole atomic append that landed would read as committed; a torn one
 * only as a torn tail), and no batch of it stays in the log for a start to write again. When that
 * cannot be done the failure is answered `unknown` (Store.ts): its records may stand.
 */
import * as path from "node:path"
import { Effect, Exit } from "effect"
import { isSessionId, isSessionIdText, type SessionId } from "../../domain/Ids.js"
import { COMMIT_LOG_BYTES, JOURNAL_EXHAUSTED_WARN_MS, JOURNAL_INDEX_ENTRY_BYTES, JOURNAL_SEGMENT_BYTES, OPEN_JOURNAL_FILES, SEGMENT_ROTATE_BYTES } from "../../domain/Limits.js"
import { JournalListFailed, JournalUnavailable, JournalWriteFailed, RecordRejected, SessionAlreadyExists, SessionNotFound } from "../../services/Journal.js"
import * as CommitLog from "./CommitLog.js"
import { DELETED_DIR, JOURNAL_DIR, journalDir, openDataDir, parseSegmentName, SESSIONS_DIR, segmentName, sessionDir, tombstoneDir } from "./DataDir.js"
import { type FileDriverShape, type FileError, isExhausted, PLAIN_SEGMENT_FLAGS, SEGMENT_FLAGS, SEGMENT_WRITES_SYNCED, type SyncItem, syncNowOf, withFile } from "./FileDriver.js"
import { encodeFrame } from "./Frame.js"
import { listSegments, newSegmentPath, openHandle, readRecords, type Segment, type SessionHandle, unavailable } from "./Handle.js"
import type { CommitItem, JournalStore } from "./Store.js"

export interface FileStoreLimits {
  readonly openFiles: number
  readonly rotateBytes: number
  /**
   * Bytes a commit-log file takes before rounds switch to the other (CommitLog.ts); 0: no commit
   * log, each segment file opened with `O_DSYNC` and each round's files made durable one by one.
   */
  readonly commitLogBytes: number
}

export const defaultFileStoreLimits: FileStoreLimits = {
  openFiles: OPEN_JOURNAL_FILES,
  rotateBytes: SEGMENT_ROTATE_BYTES,
  commitLogBytes: COMMIT_LOG_BYTES
}

/** A write of a round that failed: answered once what landed of it is taken back. */
interface FailedWrite {
  readonly write: Write
  readonly index: number
  readonly reason: string
}

interface Write {
  readonly handle: SessionHandle
  readonly buffers: Array<Buffer>
  readonly sequences: Array<number>
  readonly sizes: Array<number>
  readonly bytes: number
  readonly segment: Segment
  readonly position: number
}

/**
 * Removes what deletes left half done: the tombstones of sessions whose delete was committed (its
 * rename) before the process stopped. A failure leaves them for the next start: nothing reads them.
 */
const removeTombstones = (driver: FileDriverShape, dataDir: string) =>
  Effect.gen(function*() {
    const deleted = path.join(dataDir, DELETED_DIR)
    const tombs = yield* Effect.orElseSucceed(driver.readdir(deleted), () => [] as ReadonlyArray<string>)
    if (tombs.length === 0) return
    for (const name of tombs) yield* Effect.ignore(driver.rmrf(path.join(deleted, name)))
    yield* Effect.ignore(driver.syncDir(deleted))
  })

/**
 * What a creation cut off by a crash leaves of a session (`create` makes these one after another,
 * and its creator writes the first record next): the session's directory alone, with its empty
 * `journal/`, or with empty segments in it (a torn first write is truncated to nothing by the open
 * before anyone asks). Anything else there, a byte of a segment or a file of another name, is not
 * debris. `absent`: the directory is not there at all.
 */
const debrisOf = (driver: FileDriverShape, dataDir: string, session: SessionId): Effect.Effect<"absent" | "debris" | "kept"> =>
  Effect.gen(function*() {
    const names = yield* driver.readdir(sessionDir(dataDir, session))
    if (names.some((name) => name !== JOURNAL_DIR)) return "kept"
    if (names.length === 0) return "debris"
    const jdir = journalDir(dataDir, session)
    const segments = yield* driver.readdir(jdir)
    if (segments.some((name) => parseSegmentName(name) === undefined)) return "kept"
    for (const name of segments) {
      const file = path.join(jdir, name)
      const bytes = driver.fileSize !== undefined ? yield* driver.fileSize(file) : yield* withFile(driver, file, "r", driver.size)
      if (bytes > 0) return "kept"
    }
    return "debris"
  }).pipe(
    // Not known to be debris (a directory gone meanwhile, or one that cannot be read): nothing is removed.
    Effect.catchAll((e) => Effect.succeed(e.code === "ENOENT" && e.path === sessionDir(dataDir, session) ? "absent" as const : "kept" as const))
  )

export const make = (driver: FileDriverShape, dataDir: string, options: { readonly lockWaitMs?: number; readonly limits?: Partial<FileStoreLimits> } = {}) =>
  Effect.gen(function*() {
    yield* openDataDir(dataDir, options.lockWaitMs)
    yield* removeTombstones(driver, dataDir)
    const limits = { ...defaultFileStoreLimits, ...options.limits }
    // What the last process's commit log holds is written again first, whichever way this one writes.
    const recovered = yield* CommitLog.recover(driver, dataDir, limits.commitLogBytes)
    const log = limits.commitLogBytes > 0 ? CommitLog.make(driver, dataDir, recovered, limits.commitLogBytes) : undefined
    if (log === undefined) for (const fd of recovered.fds) yield* Effect.ignore(driver.close(fd))
    const flags = log === undefined ? SEGMENT_FLAGS : PLAIN_SEGMENT_FLAGS
    /** Handles holding an open write descriptor, least recently written first. */
    const openFds = new Set<SessionHandle>()
    /** True while a round's writes are in flight. */
    let inRound = false
    /** Descriptors to close once the round in flight ends. */
    const releasing = new Set<SessionHandle>()

    // Out of descriptors: said in the log at most once per interval (a leak or a flood refuses many at once).
    let refusedSinceWarning = 0
    let warnedAtMs = Number.NEGATIVE_INFINITY
    const warnExhausted = (e: JournalUnavailable) =>
      Effect.clockWith((clock) => {
        refusedSinceWarning++
        const now = clock.unsafeCurrentTimeMillis()
        if (now - warnedAtMs < JOURNAL_EXHAUSTED_WARN_MS && now >= warnedAtMs) return Effect.void
        warnedAtMs = now
        const refused = refusedSinceWarning
        refusedSinceWarning = 0
        return Effect.logWarning(
          `the journal cannot open files: ${e.reason} (the open-file limit is reached). ${refused} journal access(es) refused with 503 overloaded since the last warning; nothing is damaged. Raise the open-file limit (ulimit -n) or lower BRAIN_MAX_CONNECTIONS. Said at most once a minute`
        )
      })
    // A file the file system refuses to read (its owner or mode, the disk): said as what it is, never as damage, at most once per interval too.
    let unreadableWarnedAtMs = Number.NEGATIVE_INFINITY
    const warnUnreadable = (e: JournalUnavailable) =>
      Effect.clockWith((clock) => {
        const now = clock.unsafeCurrentTimeMillis()
        if (now - unreadableWarnedAtMs < JOURNAL_EXHAUSTED_WARN_MS && now >= unreadableWarnedAtMs) return Effect.void
        unreadableWarnedAtMs = now
        return Effect.logWarning(`${e.message}. Said at most once a minute`)
      })
    const noting = <A, E>(effect: Effect.Effect<A, E>) =>
      Effect.tapError(effect, (e) => !(e instanceof JournalUnavailable) ? Effect.void : e.why === "unreadable" ? warnUnreadable(e) : warnExhausted(e))

    const closeFd = (handle: SessionHandle) =>
      Effect.suspend(() => {
        openFds.delete(handle)
        const fd = handle.fd
        handle.fd = undefined
        if (fd === undefined) return Effect.void
        return log === undefined ? Effect.ignore(driver.close(fd)) : Effect.zipRight(log.closing(handle, fd), Effect.ignore(driver.close(fd)))
      })
    const release = (handle: SessionHandle) =>
      Effect.suspend(() => {
        if (inRound) {
          releasing.add(handle)
          return Effect.void
        }
        return closeFd(handle)
      })

    /** The session's final segment open for writing at its end, rotated first when the frames would pass the limit. */
    const positioned = (handle: SessionHandle, firstSequence: number, bytes: number) =>
      Effect.gen(function*() {
        let seg = handle.finalSegment
        if (!seg || (seg.size > 0 && seg.size + bytes > limits.rotateBytes)) {
          // Rotate (or start): the new segment is named by the first sequence it will hold.
          if (handle.fd !== undefined) yield* closeFd(handle)
          const file = newSegmentPath(handle, firstSequence)
          handle.fd = yield* driver.open(file, flags.create)
          yield* driver.syncDir(handle.dir)
          seg = { firstSequence, path: file, size: 0 }
          handle.segments.push(seg)
        } else if (handle.fd === undefined) {
          handle.fd = yield* driver.open(seg.path, flags.append)
        }
        openFds.delete(handle)
        openFds.add(handle)
        return seg
      })

    /** The final segment when it is open and takes `bytes` more without rotating (the common case: no file call). */
    const positionedNow = (handle: SessionHandle, bytes: number): Segment | undefined => {
      const seg = handle.finalSegment
      if (!seg || handle.fd === undefined || (seg.size > 0 && seg.size + bytes > limits.rotateBytes)) return undefined
      openFds.delete(handle)
      openFds.add(handle)
      return seg
    }

    /**
     * One round. Frames are encoded and, in the common case, every file is already open at its
     * end, so the round is one `syncMany` and nothing else: no generator, no effect per session
     * (a text turn has three rounds). Sessions that need a file opened or a segment rotated take
     * the general path first.
     */
    const commit = (items: ReadonlyArray<CommitItem<SessionHandle>>, onDone: (index: number, failure: string | undefined) => void) => {
      const before = log?.beforeRound()
      return before === undefined ? round(items, onDone) : Effect.zipRight(before, round(items, onDone))
    }

    /**
     * The same round started now, on the driver's callbacks (Store.ts `commitNow`), when no log
     * is to be switched first and every file is open at its end: the writes submitted in this
     * step, and what is left after them (a failed write taken back, descriptors closed) handed to
     * `onEnd` as an effect, or nothing. Otherwise the round as `commit`'s effect.
     */
    const commitNow = (
      items: ReadonlyArray<CommitItem<SessionHandle>>,
      onDone: (index: number, failure: string | undefined, unknown?: boolean) => void,
      onEnd: (rest: Effect.Effect<void> | undefined) => void
    ): Effect.Effect<void> | undefined => {
      const now = syncNowOf(driver)
      if (now === undefined || log?.beforeRound() !== undefined || log?.failure !== undefined) return commit(items, onDone)
      const r = begin(items, onDone)
      if (r.slow !== undefined) return finish(r)
      if (r.writes.length === 0) {
        onEnd(endRoundNow(items))
        return undefined
      }
      now(syncItems(r), r.itemDone, log?.batch(r.writes.map((w) => w.segment)), () => {
        const failed = r.failed
        onEnd(failed === undefined ? endRoundNow(items) : Effect.ensuring(takeBack(failed, onDone), endRound(items)))
      })
      return undefined
    }

    /** A round begun: its frames encoded, the writes of the files open at their end, and how each write's end is told. */
    interface Round {
      readonly items: ReadonlyArray<CommitItem<SessionHandle>>
      readonly onDone: (index: number, failure: string | undefined, unknown?: boolean) => void
      readonly writes: Array<Write>
      readonly indexOf: Array<number>
      /** Writes whose file must be opened or rotated first (`positioned`). */
      readonly slow: Array<{ readonly index: number; readonly write: Omit<Write, "segment" | "position"> }> | undefined
      /** The round's failed writes: answered once what landed of them is taken back (`takeBack`). */
      failed: Array<FailedWrite> | undefined
      readonly itemDone: (k: number, error: FileError | undefined) => void
    }

    const begin = (items: ReadonlyArray<CommitItem<SessionHandle>>, onDone: Round["onDone"]): Round => {
      inRound = true
      const writes: Array<Write> = []
      const indexOf: Array<number> = []
      let slow: Round["slow"]
      for (let i = 0; i < items.length; i++) {
        const { records, recordedAtMs, state: handle } = items[i]!
        if (handle.failed) {
          onDone(i, "an earlier write of this journal failed")
          continue
        }
        const buffers: Array<Buffer> = []
        const sequences: Array<number> = []
        const sizes: Array<number> = []
        let bytes = 0
        for (const r of records) {
          const [head, json] = encodeFrame(r.sequence, r.recordedAtMs ?? recordedAtMs, r.prepared.kindBytes, r.prepared.json, r.continues)
          buffers.push(head, json)
          sequences.push(r.sequence)
          sizes.push(head.length + json.length)
          bytes += head.length + json.length
        }
        const seg = positionedNow(handle, bytes)
        if (seg) {
          writes.push({ handle, buffers, sequences, sizes, bytes, segment: seg, position: seg.size })
          indexOf.push(i)
        } else (slow ??= []).push({ index: i, write: { handle, buffers, sequences, sizes, bytes } })
      }
      const r: Round = {
        items,
        onDone,
        writes,
        indexOf,
        slow,
        failed: undefined,
        itemDone: (k, error) => {
          const w = writes[k]!
          if (error) {
            w.handle.failed = true
            releasing.add(w.handle)
            ;(r.failed ??= []).push({ write: w, index: indexOf[k]!, reason: error.reason })
            return
          }
          const segIndex = w.handle.segments.indexOf(w.segment)
          let offset = w.position
          for (let q = 0; q < w.sequences.length; q++) {
            w.handle.remember(w.sequences[q]!, segIndex, offset)
            offset += w.sizes[q]!
          }
          w.segment.size = offset
          log?.written(w.handle)
          onDone(indexOf[k]!, undefined)
        }
      }
      return r
    }

    const syncItems = (r: Round): Array<SyncItem> =>
      r.writes.map((w) => ({ fd: w.handle.fd!, buffers: w.buffers, position: w.position, bytes: w.bytes, synced: log === undefined && SEGMENT_WRITES_SYNCED }))

    /** The rest of a begun round as an effect: its files opened, its writes made durable, failures taken back, the round ended. */
    const finish = (r: Round) => {
      const opened = r.slow === undefined ? Effect.void : Effect.forEach(r.slow, ({ index, write }) =>
        Effect.match(positioned(write.handle, write.sequences[0]!, write.bytes), {
          onFailure: (e) => {
            write.handle.failed = true
            releasing.add(write.handle)
            r.onDone(index, e.reason)
          },
          onSuccess: (seg) => {
            r.writes.push({ ...write, segment: seg, position: seg.size })
            r.indexOf.push(index)
          }
        }), { discard: true })
      const synced = Effect.suspend(() =>
        r.writes.length === 0 ? Effect.void : driver.syncMany(syncItems(r), r.itemDone, log?.batch(r.writes.map((w) => w.segment)))
      )
      const logged = Effect.zipRight(synced, Effect.suspend(() => r.failed === undefined ? Effect.void : takeBack(r.failed, r.onDone)))
      return Effect.ensuring(r.slow === undefined ? logged : Effect.zipRight(opened, logged), endRound(r.items))
    }

    const round = (items: ReadonlyArray<CommitItem<SessionHandle>>, onDone: (index: number, failure: string | undefined) => void) =>
      Effect.suspend(() => {
        if (log?.failure !== undefined) {
          for (let i = 0; i < items.length; i++) onDone(i, log.failure)
          return Effect.void
        }
        return finish(begin(items, onDone))
      })

    /**
     * A round's failed writes taken back before they are answered (the module's "A failed write"):
     * the round's batch erased from the commit log when its write failed, then each failed write's
     * segment cut back to where the write began, and synced. A failure answered `unknown` is one
     * where either could not be done: what landed of it may stand.
     */
    const takeBack = (failed: ReadonlyArray<FailedWrite>, onDone: (index: number, failure: string | undefined, unknown?: boolean) => void) =>
      Effect.flatMap(log?.erased() ?? Effect.succeed(true), (erased) =>
        Effect.forEach(
          failed,
          ({ index, reason, write }) => Effect.map(cutBack(write, reason), (cut) => onDone(index, reason, !(erased && cut))),
          { concurrency: "unbounded", discard: true }
        ))

    /** A failed write's segment cut back to where the write began, and synced; false when that failed. */
    const cutBack = (w: Write, reason: string): Effect.Effect<boolean> =>
      Effect.suspend(() => {
        // Still open: a failed handle's descriptor is closed only once the round ends.
        const fd = w.handle.fd
        if (fd === undefined) return Effect.succeed(false)
        return Effect.flatMap(Effect.exit(Effect.zipRight(driver.ftruncate(fd, w.position), driver.fdatasync(fd))), (exit) =>
          Exit.isSuccess(exit)
            ? Effect.succeed(true)
            : Effect.as(log?.notCutBack(fd, `${reason}, and the journal file could not be cut back to its committed end`) ?? Effect.void, false))
      })

    /** After a round: descriptors released meanwhile are closed, and idle ones past the limit. */
    const endRound = (items: ReadonlyArray<CommitItem<SessionHandle>>) => Effect.suspend(() => endRoundNow(items) ?? Effect.void)

    /** `endRound` in this step: the round is over, and the closing of descriptors it leaves, if any, is answered as an effect. */
    const endRoundNow = (items: ReadonlyArray<CommitItem<SessionHandle>>): Effect.Effect<void> | undefined => {
      inRound = false
      if (releasing.size === 0 && openFds.size <= limits.openFiles) return undefined
      return Effect.gen(function*() {
        for (const h of releasing) yield* closeFd(h)
        releasing.clear()
        yield* closeIdleFds(new Set(items.map((i) => i.state)))
      })
    }

    const closeIdleFds = (active: ReadonlySet<SessionHandle>) =>
      Effect.gen(function*() {
        if (openFds.size <= limits.openFiles) return
        for (const h of openFds) {
          if (openFds.size <= limits.openFiles) break
          if (active.has(h)) continue
          yield* closeFd(h)
        }
      })

    const store: JournalStore<SessionHandle> = {
      create: (session) =>
        Effect.gen(function*() {
          const dir = sessionDir(dataDir, session)
          // A deleted session's id while the commit log may still hold its writes counts as taken.
          if (log !== undefined && !log.mayCreate(session)) return yield* Effect.fail(new SessionAlreadyExists({ session }))
          if (yield* driver.exists(dir)) return yield* Effect.fail(new SessionAlreadyExists({ session }))
          const jdir = journalDir(dataDir, session)
          yield* Effect.gen(function*() {
            yield* driver.mkdir(jdir)
            yield* withFile(driver, path.join(jdir, segmentName(1)), "wx", () => Effect.void)
            yield* driver.syncDir(jdir)
            yield* driver.syncDir(dir)
            yield* driver.syncDir(path.join(dataDir, SESSIONS_DIR))
          }).pipe(
            // A lack of descriptors is not a failed write: nothing was written, and a retry can work.
            Effect.mapError((e) => isExhausted(e) ? unavailable(session, e) : new JournalWriteFailed({ session, reason: e.reason })),
            // Nothing of a creation that failed is kept (its id was never given out); best effort.
            Effect.tapError(() => Effect.ignore(driver.rmrf(dir)))
          )
        }).pipe(noting),
      exists: (session) => driver.exists(journalDir(dataDir, session)),
      // A directory that cannot be listed is an error, never "no sessions".
      list: driver.readdir(path.join(dataDir, SESSIONS_DIR)).pipe(
        Effect.map((names) => names.filter(isSessionId) as Array<SessionId>),
        Effect.catchAll((e) =>
          e.code === "ENOENT"
            ? Effect.succeed([] as Array<SessionId>)
            : Effect.fail(isExhausted(e) ? unavailable(undefined, e) : new JournalListFailed({ reason: e.reason }))
        ),
        noting
      ),
      listable: isSessionId,
      open: (session) =>
        Effect.map(openHandle(driver, dataDir, session, true, true), (o) => ({
          state: o.handle,
          lastSequence: o.lastSequence,
          lastRecordedAtMs: o.lastRecordedAtMs,
          recent: o.recent
        })).pipe(noting),
      commit,
      commitNow,
      read: (handle, after, last, limit, maxBytes) => noting(readRecords(driver, handle, after, last, limit, maxBytes)),
      size: (handle) => {
        let bytes = 0
        for (const seg of handle.segments) bytes += seg.size
        return bytes
      },
      weight: (handle) => handle.segments.length * JOURNAL_SEGMENT_BYTES + handle.index.length * JOURNAL_INDEX_ENTRY_BYTES,
      readBytes: (handle, after) => handle.bytesToRead(after),
      segments: (handle) => handle.segments.map((seg) => ({ firstSequence: seg.firstSequence, bytes: seg.size })),
      storedBytes: (session) => {
        const fileSize = driver.fileSize
        if (fileSize === undefined) return Effect.succeed(undefined)
        return listSegments(driver, dataDir, session).pipe(
          Effect.flatMap(({ segments }) =>
            Effect.forEach(segments, (s) => Effect.map(fileSize(s.path), (bytes) => ({ firstSequence: s.firstSequence, bytes })))
          ),
          // Whatever keeps the sizes from being told, the open that follows finds out and says.
          Effect.orElseSucceed(() => undefined)
        )
      },
      remove: (session, handle) =>
        Effect.gen(function*() {
          const dir = sessionDir(dataDir, session)
          if (handle) {
            handle.failed = true
            yield* release(handle)
          }
          if (!(yield* driver.exists(dir))) return yield* Effect.fail(new SessionNotFound({ session }))
          log?.deletedSession(session)
          // The delete is the rename: a crash before it leaves the session whole, after it leaves a
          // tombstone that no list or open sees and the next start removes (`removeTombstones`).
          const tomb = tombstoneDir(dataDir, session)
          const deleted = path.dirname(tomb)
          yield* driver.mkdir(deleted).pipe(
            Effect.zipRight(driver.rmrf(tomb)),
            Effect.zipRight(driver.rename(dir, tomb)),
            // The tombstone's entry first, then the session's entry gone: never neither.
            Effect.zipRight(driver.syncDir(deleted)),
            Effect.zipRight(driver.syncDir(path.join(dataDir, SESSIONS_DIR))),
            Effect.mapError((e) => new JournalWriteFailed({ session, reason: e.reason }))
          )
          // The session is gone by now: a tombstone left by a failure here is the next start's to remove.
          yield* Effect.ignore(Effect.zipRight(driver.rmrf(tomb), driver.syncDir(deleted)))
        }),
      isDebris: (session) => Effect.map(debrisOf(driver, dataDir, session), (found) => found === "debris"),
      // Removed in place, not through a tombstone: whatever part of it a crash in the middle leaves is debris still.
      sweep: (session) =>
        Effect.flatMap(debrisOf(driver, dataDir, session), (found) => {
          if (found !== "debris") return Effect.succeed(found === "absent")
          // Its id is not created again while the commit log may name its files (a deleted session's rule).
          log?.deletedSession(session)
          return driver.rmrf(sessionDir(dataDir, session)).pipe(
            Effect.zipRight(driver.syncDir(path.join(dataDir, SESSIONS_DIR))),
            Effect.as(true),
            Effect.orElseSucceed(() => false)
          )
        }),
      release,
      close: Effect.gen(function*() {
        if (log !== undefined) yield* log.close
        for (const h of openFds) {
          if (h.fd !== undefined) yield* Effect.ignore(driver.close(h.fd))
          h.fd = undefined
        }
        openFds.clear()
      })
    }
    return onlySessionIds(store)
  })

/**
 * The store with no path built from an id that is not a session id (`../../etc`, `ses_x/y`), whoever
 * asks: a session's directory is `sessions/{id}` only for an id of the pattern. Such an id is
 * refused a create, and is otherwise a session with no journal (nothing found, nothing removed).
 */
const onlySessionIds = (store: JournalStore<SessionHandle>): JournalStore<SessionHandle> => ({
  ...store,
  create: (session) =>
    isSessionIdText(session)
      ? store.create(session)
      : Effect.fail(new RecordRejected({ reason: `${JSON.stringify(session).slice(0, 100)} is not a session id: no journal is made for it` })),
  exists: (session) => (isSessionIdText(session) ? store.exists(session) : Effect.succeed(false)),
  open: (session) => (isSessionIdText(session) ? store.open(session) : Effect.fail(new SessionNotFound({ session }))),
  storedBytes: (session) => (isSessionIdText(session) ? store.storedBytes!(session) : Effect.succeed(undefined)),
  remove: (session, state, generation) =>
    isSessionIdText(session) ? store.remove(session, state, generation) : Effect.fail(new SessionNotFound({ session })),
  isDebris: (session) => (isSessionIdText(session) ? store.isDebris!(session) : Effect.succeed(false)),
  sweep: (session) => (isSessionIdText(session) ? store.sweep!(session) : Effect.succeed(true))
})

/**
 * Checkpoint stores. The file store writes `sessions/{id}/checkpoint` atomically: a temporary
 * file, fdatasync, rename, directory fsync — so a crash leaves the old checkpoint or the new
 * one, never a mix, and perhaps a temporary file, which the session's next save removes. Checkpoints are disposable: a checkpoint that is missing, or cannot be read
 * for what is wrong with it (EIO, EISDIR, …), means "none", and the state is folded from the
 * journal. One that cannot be read *now* for want of descriptors (EMFILE, ENFILE) is not "none":
 * the read fails `JournalUnavailable` (503 `overloaded`, retryable) as the journal's own reads do,
 * rather than fold a long journal from its start — through files it could not open either.
 */
import * as path from "node:path"
import { Effect, Layer, Option, Random } from "effect"
import { isSessionIdText, type SessionId } from "../domain/Ids.js"
import { type CheckpointPieces, CheckpointStore, CheckpointWriteFailed, type CheckpointStoreShape } from "../services/Projection.js"
import { CHECKPOINT_FILE, sessionDir } from "./journal/DataDir.js"
import { FileDriver, isExhausted, withFile } from "./journal/FileDriver.js"
import { unavailable } from "./journal/Handle.js"
import { CHECKPOINT_HEAD_BYTES, checkpointThrough } from "./projection/Checkpoint.js"

export { CHECKPOINT_FILE }

const encodingFailed = (session: string, e: unknown) =>
  new CheckpointWriteFailed({ session, reason: `encoding failed: ${e instanceof Error ? e.message : String(e)}` })

const bufferOf = (bytes: Uint8Array) => (Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength))

/** All of the pieces' bytes in one buffer (the memory store's; a buffer may be far larger than a string). */
export const piecesBytes = (pieces: CheckpointPieces): Buffer => {
  const rest = [...pieces.rest].map(bufferOf)
  return Buffer.concat([bufferOf(pieces.head()), ...rest])
}

/** Pieces holding `text` whole, with no head: for tests and tools that save a text they already have. */
export const textPieces = (text: string): CheckpointPieces => ({
  headBytes: 0,
  rest: [Buffer.from(text, "utf8")],
  head: () => Buffer.alloc(0)
})

/** A checkpoint's temporary file: `checkpoint.{random}.tmp`. */
const TEMPORARY = /^checkpoint\.\d+\.tmp$/

export const makeFile = (dataDir: string) =>
  Effect.gen(function*() {
    const driver = yield* FileDriver
    /** Temporary files this process is writing now; any other in a session's directory a crash left there. */
    const writing = new Set<string>()
    /**
     * Removes the temporary files of the session's earlier saves that a crash cut short (a kill -9
     * between the write and the rename): nothing else ever would, and each is a whole state's bytes.
     * Best effort, before the directory's fsync that makes the new checkpoint durable.
     */
    const sweepTemporaries = (dir: string) =>
      Effect.ignore(Effect.flatMap(driver.readdir(dir), (names) =>
        Effect.forEach(
          names.filter((name) => TEMPORARY.test(name) && !writing.has(path.join(dir, name))),
          (name) => driver.unlink(path.join(dir, name)),
          { discard: true }
        )))
    /** Writes the pieces into the open file: `rest` a chunk at a time after the head's room, then the head. */
    function* writePieces(fd: number, session: SessionId, pieces: CheckpointPieces) {
      const chunks = pieces.rest[Symbol.iterator]()
      let at = pieces.headBytes
      for (;;) {
        const next = yield* Effect.try({ try: () => chunks.next(), catch: (e) => encodingFailed(session, e) })
        if (next.done) break
        yield* driver.writev(fd, [bufferOf(next.value)], at)
        at += next.value.byteLength
      }
      const head = yield* Effect.try({ try: () => pieces.head(), catch: (e) => encodingFailed(session, e) })
      if (head.byteLength !== pieces.headBytes) return yield* Effect.fail(encodingFailed(session, "its head is not the size it said"))
      if (head.byteLength > 0) yield* driver.writev(fd, [bufferOf(head)], 0)
      yield* driver.fdatasync(fd)
    }
    function* saveOf(session: SessionId, pieces: CheckpointPieces) {
      const dir = sessionDir(dataDir, session)
      const tmp = path.join(dir, `${CHECKPOINT_FILE}.${yield* Random.nextIntBetween(0, 1 << 30)}.tmp`)
      writing.add(tmp)
      yield* Effect.gen(function*() {
        yield* withFile(driver, tmp, "wx", (fd) => Effect.gen(() => writePieces(fd, session, pieces))).pipe(
          Effect.tapError(() => Effect.ignore(driver.unlink(tmp)))
        )
        yield* driver.rename(tmp, path.join(dir, CHECKPOINT_FILE))
      }).pipe(Effect.ensuring(Effect.sync(() => writing.delete(tmp))))
      yield* sweepTemporaries(dir)
      yield* driver.syncDir(dir)
    }
    const store: Required<CheckpointStoreShape> = {
      load: (session) =>
        driver.readFile(path.join(sessionDir(dataDir, session), CHECKPOINT_FILE)).pipe(
          Effect.map((buf): Option.Option<Uint8Array> => Option.some(buf)),
          Effect.catchAll((e) => (isExhausted(e) ? Effect.fail(unavailable(session, e)) : Effect.succeed(Option.none())))
        ),
      save: (session, pieces) =>
        Effect.gen(() => saveOf(session, pieces)).pipe(
          Effect.mapError((e) => (e instanceof CheckpointWriteFailed ? e : new CheckpointWriteFailed({ session, reason: e.reason })))
        ),
      size: (session) => {
        const fileSize = driver.fileSize
        return fileSize === undefined
          ? Effect.succeed(0)
          : Effect.orElseSucceed(fileSize(path.join(sessionDir(dataDir, session), CHECKPOINT_FILE)), () => 0)
      },
      through: (session) =>
        Effect.suspend(() => {
          const head = Buffer.alloc(CHECKPOINT_HEAD_BYTES)
          return withFile(driver, path.join(sessionDir(dataDir, session), CHECKPOINT_FILE), "r", (fd) => driver.read(fd, head, 0)).pipe(
            Effect.map((read) => checkpointThrough(head.subarray(0, read).toString("utf8"))),
            // Whatever keeps it from being read now, the open that follows finds out and says.
            Effect.orElseSucceed(() => undefined)
          )
        })
    }
    return onlySessionIds(store)
  })

/**
 * The store with no path built from an id that is not a session id, whoever asks (as the file
 * journal, FileStore.ts): such an id has no checkpoint, and one is never saved for it.
 */
const onlySessionIds = (store: Required<CheckpointStoreShape>): CheckpointStoreShape => ({
  load: (session) => (isSessionIdText(session) ? store.load(session) : Effect.succeed(Option.none())),
  save: (session, pieces) =>
    isSessionIdText(session)
      ? store.save(session, pieces)
      : Effect.fail(new CheckpointWriteFailed({ session, reason: "not a session id: no checkpoint is kept for it" })),
  size: (session) => (isSessionIdText(session) ? store.size(session) : Effect.succeed(0)),
  through: (session) => (isSessionIdText(session) ? store.through(session) : Effect.succeed(undefined))
})

export const layerFile = (dataDir: string) => Layer.effect(CheckpointStore, makeFile(path.resolve(dataDir)))

export const makeMemory = Effect.sync(() => {
  const texts = new Map<string, Buffer>()
  const store: CheckpointStoreShape = {
    load: (session) => Effect.sync(() => Option.fromNullable(texts.get(session) as Uint8Array | undefined)),
    save: (session, pieces) =>
      Effect.try({ try: () => void texts.set(session, piecesBytes(pieces)), catch: (e) => encodingFailed(session, e) }),
    size: (session) => Effect.sync(() => texts.get(session)?.length ?? 0),
    through: (session) => Effect.sync(() => checkpointThrough(texts.get(session)?.toString("utf8", 0, CHECKPOINT_HEAD_BYTES) ?? ""))
  }
  return { store, texts }
})

export const layerMemory = Layer.effect(CheckpointStore, Effect.map(makeMemory, (m) => m.store))

/**
 * The on-disk Journal (embedded default): the journal core (journal/Core.ts) over the file store
 * (journal/FileStore.ts): segment files under `{dataDir}/sessions/{id}/journal/`, group-committed
 * by one writer per process, the data directory locked by this process.
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { Effect, Layer, type Scope } from "effect"
import { Journal, type JournalShape } from "../services/Journal.js"
import * as Core from "./journal/Core.js"
import type { DataDirError } from "./journal/DataDir.js"
import { FileDriver, nodeDriver } from "./journal/FileDriver.js"
import * as FileStore from "./journal/FileStore.js"
import type { WriterLimits } from "./journal/Writer.js"

export interface JournalFileOptions {
  readonly dataDir: string
  /** How long to wait for a data-directory lock held by a live (perhaps exiting) process. */
  readonly lockWaitMs?: number
  readonly limits?: Partial<WriterLimits & FileStore.FileStoreLimits>
  /** Opened journals kept in memory (default OPEN_JOURNAL_HANDLES). */
  readonly maxHandles?: number
  /** Heap the opened journals kept in memory may hold (Core.ts); default: no bound. */
  readonly maxHandleBytes?: number
  /** Sessions the in-memory listing index holds at most (journal/Listing.ts); default: no bound. */
  readonly maxListed?: number
}

export const make = (options: JournalFileOptions): Effect.Effect<JournalShape, DataDirError, FileDriver | Scope.Scope> =>
  Effect.gen(function*() {
    const driver = yield* FileDriver
    const root = path.resolve(options.dataDir)
    const store = yield* FileStore.make(driver, root, {
      ...(options.lockWaitMs !== undefined ? { lockWaitMs: options.lockWaitMs } : {}),
      ...(options.limits ? { limits: options.limits } : {})
    })
    const journal = yield* Core.make(store, {
      ...(options.limits ? { limits: options.limits } : {}),
      ...(options.maxHandles !== undefined ? { maxHandles: options.maxHandles } : {}),
      ...(options.maxHandleBytes !== undefined ? { maxHandleBytes: options.maxHandleBytes } : {}),
      ...(options.maxListed !== undefined ? { maxListed: options.maxListed } : {})
    })
    // Spread with the core's own `append` and `stage`: its `enqueue` and `stageNow` still serve.
    return { ...journal, freeBytes: freeBytesOf(root) }
  })

/**
 * The bytes the file system holding `dir` has free for an unprivileged writer (statfs `bavail`
 * blocks of `bsize`); undefined when it cannot be read (the watermark then refuses nothing).
 */
export const freeBytesOf = (dir: string): Effect.Effect<number | undefined> =>
  Effect.orElseSucceed(
    Effect.tryPromise(() => fs.promises.statfs(dir)).pipe(Effect.map((s) => s.bavail * s.bsize)),
    () => undefined
  )

/** The file journal over a data directory, with the given file driver. */
export const layer = (options: JournalFileOptions) => Layer.scoped(Journal, make(options))

/** The file journal on Node's file system: the embedded default. */
export const layerNode = (options: JournalFileOptions) =>
  layer(options).pipe(Layer.provide(Layer.succeed(FileDriver, nodeDriver)))

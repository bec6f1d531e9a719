/**
 * A group-commit round's writes and fdatasyncs, handed to a thread of their own (SyncWorker.ts) in
 * one message: the main thread copies the round's bytes once and posts them, instead of submitting
 * a write and an fdatasync to libuv's threadpool for every file (about 20 µs of the main thread's
 * time each on this project's VM). The files are still written and synced all at once, on the same
 * threadpool, from that thread; each file's outcome is reported when the whole round is done.
 *
 * - One thread per process, started on the first round and kept (it holds the process open only
 *   while a round is in it).
 * - A thread that fails or exits fails every round in it (each file `EIO`, "the sync thread …"):
 *   nothing is known to be durable, and the journal treats it as any failed write. The next round
 *   starts a new thread.
 * - Few files gain nothing: the hop to the thread and back costs more than it saves, and adds its
 *   latency to the round (FileDriver.ts sends rounds of SYNC_THREAD_MIN_FILES or more here).
 */
import { Worker } from "node:worker_threads"
import { DIST_ROOT } from "../../DistRoot.js"
import type { LogFailure, SyncAnswer, SyncFailure, SyncRequest, SyncRoundLog } from "./SyncWorker.js"

/** The sync thread's module (compiled; under the tests too). */
export const WORKER_URL = new URL("layers/journal/SyncWorker.js", DIST_ROOT)

export interface SyncRoundItem {
  readonly fd: number
  readonly buffers: ReadonlyArray<Uint8Array>
  readonly position: number
  /** Opened with `O_DSYNC`: the write is durable when it returns, no fdatasync follows. */
  readonly synced?: boolean
}

/** What one file of a round came to: undefined when written and synced, else why not (`log`: the commit log's write failed). */
export type SyncOutcome = (Omit<SyncFailure, "index"> & { readonly log?: boolean }) | undefined

/** What the commit log's write came to: the batch's bytes, or its failure. */
export interface LoggedOutcome {
  readonly bytes: number
  readonly failure: LogFailure | undefined
}

type Done = (outcomes: ReadonlyArray<SyncOutcome>, logged: LoggedOutcome | undefined) => void

let worker: Worker | undefined
let nextId = 0
const rounds = new Map<number, { readonly files: number; readonly logged: boolean; readonly done: Done }>()

/** Every round in the thread fails: it is gone, and with it whatever it had not reported. */
const lost = (w: Worker, why: string) => {
  if (worker !== w) return
  worker = undefined
  const failed = [...rounds.values()]
  rounds.clear()
  for (const r of failed) {
    const failure = { op: "write" as const, code: "EIO", detail: `the sync thread ${why}` }
    r.done(Array.from({ length: r.files }, () => failure), r.logged ? { bytes: 0, failure } : undefined)
  }
}

const start = (): Worker => {
  const w = new Worker(WORKER_URL)
  w.unref()
  w.on("message", ({ failures, id, logBytes, logFailure }: SyncAnswer) => {
    const round = rounds.get(id)
    if (round === undefined) return
    rounds.delete(id)
    if (rounds.size === 0) w.unref()
    const outcomes: Array<SyncOutcome> = new Array(round.files).fill(undefined)
    for (const f of failures) outcomes[f.index] = { op: f.op, code: f.code, detail: f.detail }
    if (logFailure !== undefined) {
      for (let i = 0; i < outcomes.length; i++) outcomes[i] ??= { ...logFailure, log: true }
    }
    round.done(outcomes, round.logged ? { bytes: logBytes ?? 0, failure: logFailure } : undefined)
  })
  w.on("error", (err) => lost(w, `failed: ${err.message}`))
  w.on("exit", (code) => lost(w, `exited (code ${code})`))
  return w
}

/** The sync thread now, if one runs (for tests). */
export const syncThreadNow = (): Worker | undefined => worker

/**
 * Writes and syncs `items` on the sync thread; `done` gets each file's outcome, in `items`' order.
 * With `log`, the files are only written, then the batch of those written goes to the log
 * (FileDriver.ts, `syncMany`), and `done` gets what that came to too.
 */
export const syncRound = (items: ReadonlyArray<SyncRoundItem>, done: Done, log?: SyncRoundLog): void => {
  let total = 0
  for (const item of items) for (const b of item.buffers) total += b.length
  // One buffer of its own for the whole round, so it can be handed over rather than copied again.
  const data = new Uint8Array(total)
  const meta: Array<readonly [number, number, number, number, 0 | 1]> = []
  let offset = 0
  for (const item of items) {
    const from = offset
    for (const b of item.buffers) {
      data.set(b, offset)
      offset += b.length
    }
    meta.push([item.fd, item.position, from, offset - from, item.synced === true ? 1 : 0])
  }
  const w = (worker ??= start())
  const id = nextId++
  rounds.set(id, { files: items.length, logged: log !== undefined, done })
  w.ref()
  const request: SyncRequest = log === undefined
    ? { id, data: data.buffer, items: meta }
    : { id, data: data.buffer, items: meta, log: { fd: log.fd, position: log.position, use: log.use, synced: log.synced, paths: log.paths } }
  w.postMessage(request, [data.buffer])
}

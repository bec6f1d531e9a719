/**
 * The results the registry took from its hosts, remembered a while after (hosts/Calls.ts): which
 * call, a digest of the answer taken, and the call's receipt (whether its outcome record became
 * durable). A host whose post's answer was lost (its connection reset after Brain took the result)
 * posts the same result again; the call is no longer in flight, and this is how Brain tells that
 * repeat (answered as the first was) from a result for a call that ended without it (409
 * `not_in_flight`) and from a different result for a call already answered (409
 * `result_conflict`).
 *
 * - Bounded in count and age (HOST_TAKEN_RESULTS, HOST_TAKEN_RESULT_MS by default): the oldest is
 *   forgotten first. A repeat for a forgotten call is `not_in_flight`, as it was before results
 *   were remembered.
 * - Held in memory only, not rebuilt from the journal at start (not cheap): after a restart a
 *   repeat is `not_in_flight`.
 * - An entry holds its own receipt, fed by the call's: never the call's `recorded` function,
 *   whose closure holds the session's state.
 */
import * as crypto from "node:crypto"
import type { EnvironmentCall } from "../../services/Environments.js"
import type { HostAnswer } from "../../services/Hosts.js"

/** A host's answer as it is remembered and compared: the kind, then the value's JSON as Brain took it. */
export const answerDigest = (answer: HostAnswer, json: string | undefined): string =>
  crypto.createHash("sha256").update("stopped" in answer ? "stopped" : "ok" in answer ? "ok\n" : "error\n").update(json ?? "").digest("base64")

interface Entry {
  readonly digest: string
  readonly atMs: number
  /** The receipt once known; undefined while the call's outcome record is still being written. */
  recorded: boolean | undefined
  /** Listeners waiting for the receipt (only while it is unknown). */
  waiting: Array<(recorded: boolean) => void> | undefined
}

/** A remembered result: its digest, and the receipt of the call it answered (as `EnvironmentCall.recorded`). */
export interface Taken {
  readonly digest: string
  readonly recorded: NonNullable<EnvironmentCall["recorded"]>
}

export interface TakenBounds {
  /** Results remembered at most (HOST_TAKEN_RESULTS). */
  readonly max: number
  /** Milliseconds a result is remembered after it was taken (HOST_TAKEN_RESULT_MS). */
  readonly keepMs: number
}

export class TakenResults {
  /** By `host call`, in the order taken (a Map keeps insertion order): the oldest first. */
  private readonly entries = new Map<string, Entry>()

  constructor(private readonly bounds: TakenBounds, private readonly now: () => number) {}

  /** Remembers that `host` took `digest` as the answer to the call `key`; `recorded` is the call's receipt, if it has one. */
  remember(host: string, key: string, digest: string, recorded: EnvironmentCall["recorded"]): void {
    const now = this.now()
    this.expire(now)
    if (this.bounds.max <= 0) return
    const entry: Entry = { digest, atMs: now, recorded: recorded === undefined ? true : undefined, waiting: undefined }
    this.entries.set(`${host} ${key}`, entry)
    while (this.entries.size > this.bounds.max) this.entries.delete(this.entries.keys().next().value!)
    // Called at once when the receipt is known already. Not stopped: it is told once.
    recorded?.((r) => {
      entry.recorded = r
      const waiting = entry.waiting
      entry.waiting = undefined
      if (waiting !== undefined) for (const tell of waiting) tell(r)
    })
  }

  /** The result `host` gave the call `key`, if it is still remembered. */
  find(host: string, key: string): Taken | undefined {
    this.expire(this.now())
    const entry = this.entries.get(`${host} ${key}`)
    if (entry === undefined) return undefined
    return {
      digest: entry.digest,
      recorded: (tell) => {
        if (entry.recorded !== undefined) {
          tell(entry.recorded)
          return () => {}
        }
        const waiting = (entry.waiting ??= [])
        waiting.push(tell)
        return () => {
          const at = waiting.indexOf(tell)
          if (at >= 0) waiting.splice(at, 1)
        }
      }
    }
  }

  /** How many results are remembered. */
  get size(): number {
    return this.entries.size
  }

  /** Forgets what was taken `keepMs` ago or longer (the oldest are first). */
  private expire(now: number): void {
    for (const [key, entry] of this.entries) {
      if (now - entry.atMs < this.bounds.keepMs) return
      this.entries.delete(key)
    }
  }
}

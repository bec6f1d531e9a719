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

/**
 * A host's answer as it is remembered and compared: the kind, then the value's JSON as Brain took
 * it. One call of the one-shot hash (a `Hash` object and its two updates cost about twice as much,
 * for every result taken).
 */
export const answerDigest = (answer: HostAnswer, json: string | undefined): string =>
  crypto.hash("sha256", "stopped" in answer ? "stopped" : ("ok" in answer ? "ok\n" : "error\n") + (json ?? ""), "base64")

interface Entry {
  /** The host that took it. */
  readonly host: string
  /**
   * The call (`session/sequence`): its key among the entries. A call is sent to one host, so the
   * call alone names it; a host asking for another's is answered as for a call never taken.
   */
  readonly key: string
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
  /** By call (`session/sequence`). */
  private readonly entries = new Map<string, Entry>()
  /**
   * The entries in the order taken, a ring of `bounds.max` slots from `oldest`: the oldest is
   * found at once (a Map's own order would be walked past the holes its deletions leave).
   */
  private readonly ring: Array<Entry | undefined> = []
  private oldest = 0
  private count = 0

  constructor(private readonly bounds: TakenBounds, private readonly now: () => number) {}

  /** Remembers that `host` took `digest` as the answer to the call `key`; `recorded` is the call's receipt, if it has one. */
  remember(host: string, key: string, digest: string, recorded: EnvironmentCall["recorded"]): void {
    const now = this.now()
    this.expire(now)
    if (this.bounds.max <= 0) return
    if (this.count === this.bounds.max) this.dropOldest()
    const entry: Entry = { host, key, digest, atMs: now, recorded: recorded === undefined ? true : undefined, waiting: undefined }
    this.entries.set(key, entry)
    this.ring[(this.oldest + this.count) % this.bounds.max] = entry
    this.count++
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
    const entry = this.entries.get(key)
    if (entry === undefined || entry.host !== host) return undefined
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
    while (this.count > 0 && now - this.ring[this.oldest]!.atMs >= this.bounds.keepMs) this.dropOldest()
  }

  private dropOldest(): void {
    const entry = this.ring[this.oldest]!
    this.ring[this.oldest] = undefined
    this.oldest = (this.oldest + 1) % this.bounds.max
    this.count--
    // A key is taken once; should it be remembered again, the newer entry stays.
    if (this.entries.get(entry.key) === entry) this.entries.delete(entry.key)
  }
}

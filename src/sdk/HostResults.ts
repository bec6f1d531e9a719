/**
 * A host's results on their way to Brain: those ready in the same turn of the event loop go in
 * one request, which Brain takes all or none (HostCalls.ts makes them, Host.ts owns one of these).
 */
import { BrainError, isOutcomeUnrecorded } from "./Errors.js"
import type { HostResult, Run } from "./HostCalls.js"
import type { Transport } from "./Transport.js"

interface ResultBatch {
  readonly transport: Transport
  readonly items: Array<{ readonly result: HostResult; readonly run: Run; readonly resolve: (posted: boolean) => void; readonly reject: (e: unknown) => void }>
}

/** Runs `f` once this turn of the event loop is over (its I/O callbacks and their microtasks). */
const soon = (f: () => void): void => void (typeof setImmediate === "function" ? setImmediate(f) : setTimeout(f, 0))

export class ResultBatches {
  /** Results waiting for the end of this turn of the event loop, by host. */
  private readonly batches = new Map<string, ResultBatch>()

  /**
   * Posts one call's result: with the others ready in the same turn of the event loop (the calls
   * of one dispatch that finish together) in one request, `{"results": [...]}`, which Brain takes
   * all or none. A batch refused for any reason but the network or `outcome_unrecorded` (taken,
   * all of it) is posted again one result at a time, so each result meets its own answer; nothing
   * of such a refused batch was taken. Rejects with
   * this result's own refusal, as a single post would. Resolves `true` once the server took it;
   * `false` for a run lost meanwhile, which posts nothing.
   */
  post(transport: Transport, hostId: string, result: HostResult, run: Run): Promise<boolean> {
    return new Promise((resolve, reject) => {
      let waiting = this.batches.get(hostId)
      if (waiting === undefined || waiting.transport !== transport) {
        waiting = { transport, items: [] }
        this.batches.set(hostId, waiting)
        const batch = waiting
        soon(() => {
          if (this.batches.get(hostId) === batch) this.batches.delete(hostId)
          void this.flush(hostId, batch)
        })
      }
      waiting.items.push({ result, run, resolve, reject })
    })
  }

  private async flush(hostId: string, waiting: ResultBatch) {
    for (const item of waiting.items) if (item.run.lost) item.resolve(false)
    const batch = { ...waiting, items: waiting.items.filter((i) => !i.run.lost) }
    if (batch.items.length === 0) return
    const single = (item: ResultBatch["items"][number]) =>
      batch.transport.call((client) => client.hosts.results(hostId, item.result)).then(() => item.resolve(true), item.reject)
    if (batch.items.length === 1) return single(batch.items[0])
    try {
      await batch.transport.call((client) => client.hosts.results(hostId, { results: batch.items.map((i) => i.result) }))
      for (const item of batch.items) item.resolve(true)
    } catch (e) {
      // Taken, all of it (a batch is all or none), but not every outcome is known to be recorded:
      // each result is told so; posting them again would get the same answer.
      if (isOutcomeUnrecorded(e)) for (const item of batch.items) item.reject(e)
      else if (e instanceof BrainError && e.code !== "network_error") await Promise.all(batch.items.map(single))
      else for (const item of batch.items) item.reject(e)
    }
  }
}

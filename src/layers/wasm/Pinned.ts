/**
 * An activation on a worker thread that waits in its host calls without holding its thread: its
 * module's instrumented twin (Instrument.ts) runs there (GuestTwin.ts), so a host call unwinds the
 * guest into its own memory and the thread goes on to other activations while Brain performs the
 * call. The activation is **pinned** to that thread (its suspended instance lives there): once the
 * answer is there it takes the thread back (`Pool.reclaim`, ahead of anything new) and a compute
 * slot, and the worker rewinds it into the call. So loops waiting on their models and tools hold
 * no thread: the threads bound only guests without a twin, which still block theirs
 * (Activation.ts).
 *
 * Everything else is as for a blocking activation: a fresh instance, the same memory limits, the
 * compute budget counting the time the guest has the thread (and the reading of its requests), not
 * its waits; the same failures with the same messages. The budget is kept by the twin's metering
 * in the worker (the thread survives it). A guest still running BACKSTOP_MS past it (its metering
 * late, as on a loaded machine where the worker waits for a core, or absent) fails its activation
 * at its budget all the same, and is stopped as an interrupted one is (below): its thread is
 * terminated only if it does not heed that either.
 *
 * An activation interrupted while its guest computes (a cancel it ignored past its grace, a tool's
 * deadline, a server stop) ends at once, as a blocking one does; its guest is stopped by the same
 * metering (`stopRunning`): the main thread writes its pin into the thread's STOP word, the twin
 * reads it where it reads the clock and the worker drops the instance, and the thread goes on
 * serving the activations pinned beside it. Until then the thread, the guest's compute slot and
 * its pin stay held; a guest that does not heed the word within UNHEEDED_STOP_MS has its thread
 * terminated after all (the others pinned there then run again, below).
 *
 * A thread that dies takes the instances pinned to it: each of those activations runs again from
 * its start on another thread, its host calls so far answered from what was recorded, not
 * performed again — as an activation moved off the main thread (Inline.ts); so does one whose
 * thread dies while it loads, or while the activation waits there for a compute slot, before its
 * guest runs. After AGAIN_AT_MOST such runs, or when its call stack at a host call does not fit
 * the suspension buffer, it runs again blocking its own thread. One whose thread dies while its
 * own guest runs there fails, as a blocking one does: the guest may be what killed it.
 */
import { Effect, Option } from "effect"
import { failure } from "../../domain/Failure.js"
import { chargedCall, yieldsAfter } from "./HostCallCost.js"
import { errorAnswer } from "./HostBridge.js"
import {
  activate,
  type Activation,
  type ActivationFailure,
  type ActivationLimits,
  describe,
  eventsOf,
  giveSlot,
  type Hold,
  inputBytes,
  memoryLimitsOf,
  overBudget,
  takeSlot,
  takeSlotNow
} from "./Activation.js"
import { type RecordedCall, requestKey, SUSPEND_BYTES } from "./Inline.js"
import type { GuestThread, Pool, ThreadEvent } from "./Pool.js"
import { eventLoopTurn } from "../Waits.js"

/** Milliseconds past its budget a pinned guest's metering has to stop it before its activation fails at its budget without it (the guest then asked to stop, `stopRunning`). */
export const BACKSTOP_MS = 1_000

/**
 * Milliseconds a pinned guest given up while it computes has to heed its stop before its thread is
 * terminated. The metering reads the word about every millisecond of compute (GuestTwin.ts, FUEL);
 * the rest is room for a loaded machine, where the worker may wait seconds for a core (a
 * thread terminated there would rerun every guest pinned beside it).
 */
export const UNHEEDED_STOP_MS = 5_000

/** Runs again on another thread after the one it was pinned to died, at most; then it runs blocking. */
export const AGAIN_AT_MOST = 3

const encoder = new TextEncoder()

/** How a pinned activation ended: its output, or a run again from its start, answered `calls` first. */
type PinnedEnd =
  | { readonly _tag: "done"; readonly output: string }
  | { readonly _tag: "again"; readonly blocking: boolean; readonly calls: ReadonlyArray<RecordedCall> }

/** What a pinned activation holds, for its end to give back. */
interface PinHold extends Hold {
  /** It holds its thread (running there, or taken back for its answer). */
  busy: boolean
  /** Its guest runs on the thread now: ended now, the thread must be terminated. */
  running: boolean
  /** Its number on the thread while its instance lives there. */
  pin: number | undefined
  /** The thread's event for the job running now, once it has come (taken or not): its guest no longer runs. */
  arrived: ThreadEvent | undefined
}

/**
 * Runs `activation` on the pool: pinned when `twin` is given and the shared threads have room,
 * else blocking a thread (Activation.ts). `calls`: host calls already answered (a move from the
 * main thread, a thread that died), answered from the record first.
 */
export const onPool = (
  pool: Pool,
  limits: ActivationLimits,
  activation: Activation,
  twin: WebAssembly.Module | undefined,
  calls: ReadonlyArray<RecordedCall> = [],
  again = 0
): Effect.Effect<string, ActivationFailure> => {
  const replay = replaying(activation, calls)
  if (twin === undefined) return Effect.flatMap(activate(pool, replay.activation, limits), replay.check)
  return Effect.flatMap(activatePinned(pool, replay.activation, twin, limits), (end) => {
    if (end._tag === "done") return replay.check(end.output)
    if (replay.diverged()) return Effect.fail<ActivationFailure>({ _tag: "guest", message: DIFFERS })
    const blocking = end.blocking || again >= AGAIN_AT_MOST
    // A run that ended before its guest asked again every call of the record (its thread died while
    // it loaded, the shared threads were full) recorded only some of them: the record is kept whole.
    const record = end.calls.length >= calls.length ? end.calls : calls
    return onPool(pool, limits, activation, blocking ? undefined : twin, record, again + 1)
  })
}

const DIFFERS = "the guest did not repeat its host calls when its activation ran again on a worker thread (docs/abi.md, \"Where a guest runs\")"

/**
 * `activation` with its first host calls answered from `calls`, in order, and only the calls after
 * them performed. A guest that asks anything else (it cannot, unless it is not the deterministic
 * function of its input and answers the ABI makes it) gets errors from then on, nothing performed,
 * and the activation fails.
 */
const replaying = (activation: Activation, calls: ReadonlyArray<RecordedCall>) => {
  let next = 0
  let diverged = false
  const perform = (op: string, request: string): Effect.Effect<string> => {
    if (!diverged && next < calls.length) {
      const call = calls[next++]!
      if (call.op === op && call.request === requestKey(request)) return Effect.succeed(call.answer)
      diverged = true
    }
    if (diverged) return Effect.succeed(errorAnswer(failure("agentloop_failed", DIFFERS)))
    return activation.perform(op, request)
  }
  return {
    activation: calls.length === 0 ? activation : { ...activation, perform },
    diverged: () => diverged,
    check: (output: string): Effect.Effect<string, ActivationFailure> =>
      diverged || next < calls.length ? Effect.fail({ _tag: "guest", message: DIFFERS }) : Effect.succeed(output)
  }
}

/** Runs one pinned activation of `twin`; blocking (`again`) when every shared thread is full. */
const activatePinned = (pool: Pool, activation: Activation, twin: WebAssembly.Module, limits: ActivationLimits): Effect.Effect<PinnedEnd, ActivationFailure> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.suspend(() => {
      if (inputBytes(activation.input) > limits.ioBytes) {
        return Effect.fail<ActivationFailure>({ _tag: "guest", message: `the activation's input is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})` })
      }
      if (pool.pinnedFull) return Effect.succeed<PinnedEnd>({ _tag: "again", blocking: true, calls: [] })
      const hold = (thread: GuestThread) => pinnedOn(pool, thread, activation, twin, limits, restore)
      const now = pool.tryAcquire("pinned")
      if (now !== undefined) return hold(now)
      // None: the shared threads filled while it waited.
      return Effect.flatMap(restore(pool.acquirePinned), (thread) => thread === undefined ? Effect.succeed<PinnedEnd>({ _tag: "again", blocking: true, calls: [] }) : hold(thread))
    })
  )

/** Runs the activation pinned to `thread` (taken), and gives back what it holds however it ends. */
const pinnedOn = (
  pool: Pool,
  thread: GuestThread,
  activation: Activation,
  twin: WebAssembly.Module,
  limits: ActivationLimits,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
): Effect.Effect<PinnedEnd, ActivationFailure> => {
  const held: PinHold = { computing: false, healthy: true, busy: true, running: false, pin: undefined, arrived: undefined }
  return restore(run(pool, thread, activation, twin, limits, held, restore)).pipe(
    Effect.ensuring(Effect.sync(() => {
      // Given up while its guest runs: stopped by its metering, the thread kept.
      if (held.running && held.healthy && held.busy && held.pin !== undefined && !thread.dead) return stopRunning(pool, thread, held, held.pin)
      giveSlot(pool, held)
      // Its guest still running on a thread that cannot be kept: terminated (its other pins run again elsewhere).
      if (held.running) held.healthy = false
      if (held.pin !== undefined) {
        const pin = held.pin
        held.pin = undefined
        pool.unpinned(thread, pin, true)
      }
      if (held.busy) pool.releaseNow(thread, held.healthy)
    }))
  )
}

/**
 * Stops the guest of an activation given up while it runs on `thread` (its job dispatched, its
 * event not handled): the activation has ended, and what it held — the thread, its compute slot,
 * its pin — is given back once the job reports. That is `stopped` when the metering read the STOP
 * word, else wherever the guest got first (a host call: its instance is suspended there and
 * dropped, the call never performed; its output, discarded; a failure); or nothing within
 * UNHEEDED_STOP_MS, and the thread is terminated as before the word existed.
 */
const stopRunning = (pool: Pool, thread: GuestThread, held: PinHold, pin: number) => {
  let settled = false
  let timer: ReturnType<typeof setTimeout> | undefined
  const settle = (event: ThreadEvent | undefined) => {
    if (settled) return
    settled = true
    if (timer !== undefined) clearTimeout(timer)
    thread.clearStop()
    giveSlot(pool, held)
    held.running = false
    held.busy = false
    held.pin = undefined
    // Its instance left on the thread (suspended in a call, or still running) is dropped, or goes with the thread.
    if (event?.type !== "died") pool.unpinned(thread, pin, event === undefined || event.type === "call")
    pool.releaseNow(thread, event !== undefined && event.type !== "died" && !(event.type === "failed" && event.kind === "error"))
  }
  // Its job reported already (the event not yet taken when it was given up): nothing runs to stop.
  if (held.arrived !== undefined) return settle(held.arrived)
  thread.stop(pin)
  thread.listener = settle
  timer = setTimeout(() => settle(undefined), UNHEEDED_STOP_MS)
  // A guest that spins on keeps its worker, which keeps the process alive until it is terminated.
  timer.unref()
}

const run = (
  pool: Pool,
  thread: GuestThread,
  activation: Activation,
  twin: WebAssembly.Module,
  limits: ActivationLimits,
  held: PinHold,
  restore: <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>
): Effect.Effect<PinnedEnd, ActivationFailure> => {
  let remaining = limits.computeMs
  const spent = (ms: number) => void (remaining -= ms)
  const calls: Array<RecordedCall> = []
  const seen = (event: ThreadEvent) => void (held.arrived = event)
  const budgetMs = () => (limits.computeMs > 0 ? Math.max(1, Math.ceil(remaining)) : 0)
  /**
   * Gives the thread a job (`dispatch`), then waits for its next event; past the budget and the
   * backstop, none. Its events are listened for first: the worker may answer before `dispatch` returns.
   */
  const dispatched = (dispatch: () => void): Effect.Effect<PinnedEnd, ActivationFailure> => {
    const next = eventsOf(thread, seen)
    held.arrived = undefined
    held.running = true
    dispatch()
    return Effect.flatMap(next(limits.computeMs > 0 ? budgetMs() + BACKSTOP_MS : 0, spent), onEvent)
  }
  /**
   * Its thread died while it loaded, or while the activation waited there for a compute slot (or a
   * turn of the event loop), with its instance if it had one: it runs again from its start
   * elsewhere, its calls answered from the record. Nothing of its guest ran there since its last
   * call, so nothing it did is lost or done twice; and nothing of the guest was there to kill the
   * thread (a thread that dies while its guest runs fails the activation, as a blocking one's does,
   * so that a guest that kills its thread does not kill others' in turn). A job given to the dead
   * thread would never report.
   */
  const diedWaiting = () => Effect.succeed<PinnedEnd>({ _tag: "again", blocking: false, calls })
  /** Its instance is gone from the thread (ended, or failed there). */
  const ended = () => {
    held.running = false
    giveSlot(pool, held)
    if (held.pin !== undefined) pool.unpinned(thread, held.pin, false)
    held.pin = undefined
  }
  const onEvent = (got: Option.Option<ThreadEvent>): Effect.Effect<PinnedEnd, ActivationFailure> => {
    // Its metering did not stop it within the backstop (late, as on a loaded machine, or absent):
    // the activation fails at its budget, and its guest is asked to stop as an interrupted one is
    // (`stopRunning`, when it ends), its thread terminated only if it does not heed that either.
    if (Option.isNone(got)) return Effect.fail(overBudget(limits))
    const event = got.value
    switch (event.type) {
      case "call": {
        held.running = false
        giveSlot(pool, held)
        // The guest is unwound: the thread serves others while the call is performed.
        held.busy = false
        pool.releaseNow(thread, true)
        // The main thread's work on the call is the guest's compute (HostCallCost.ts).
        return chargedCall(activation.perform, event.op, event.request, (answer, callMs) => {
          spent(callMs)
          calls.push({ op: event.op, request: requestKey(event.request), answer })
          if (limits.computeMs > 0 && remaining <= 0) return Effect.fail(overBudget(limits))
          return Effect.flatMap(restore(pool.reclaim(thread, () => void (held.busy = true))), (back) => {
            // Its thread died with its instance: it runs again from its start elsewhere.
            if (!back) return Effect.succeed<PinnedEnd>({ _tag: "again", blocking: false, calls })
            const resume = () => thread.dead ? diedWaiting() : dispatched(() => thread.resume(held.pin!, answer, budgetMs()))
            const go = () => yieldsAfter(callMs) ? Effect.flatMap(eventLoopTurn, resume) : resume()
            return takeSlotNow(pool, held) ? go() : Effect.flatMap(takeSlot(pool, held), go)
          })
        })
      }
      case "done":
        ended()
        if (event.bytes > limits.ioBytes) {
          return Effect.fail({ _tag: "guest", message: `the guest's output is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})` })
        }
        return Effect.succeed({ _tag: "done", output: event.output })
      case "failed":
        ended()
        if (event.kind === "budget") return Effect.fail(overBudget(limits))
        if (event.kind === "unwind") return Effect.succeed({ _tag: "again", blocking: true, calls })
        if (event.kind === "error") held.healthy = false
        return Effect.fail({ _tag: "guest", message: describe(event.kind, event.reason) })
      case "died":
        held.running = false
        held.pin = undefined
        return Effect.fail({ _tag: "guest", message: event.reason })
    }
  }
  const start = (): Effect.Effect<PinnedEnd, ActivationFailure> => {
    if (thread.dead) return diedWaiting()
    const go = () => {
      if (thread.dead) return diedWaiting()
      activation.began?.()
      const pin = thread.pin()
      held.pin = pin
      return dispatched(() => thread.startPinned({
        moduleId: `${activation.moduleId}:twin`,
        entry: activation.entry,
        input: typeof activation.input === "string" ? encoder.encode(activation.input) : activation.input,
        memory: memoryLimitsOf(activation.memory, limits.memoryBytes),
        maxRequestBytes: limits.ioBytes,
        pin,
        budgetMs: budgetMs()
      }, twin))
    }
    return takeSlotNow(pool, held) ? go() : Effect.flatMap(takeSlot(pool, held), go)
  }
  // A new thread may still be loading: its start-up is not the guest's compute.
  return thread.loaded ? Effect.suspend(start) : Effect.flatMap(Effect.promise(() => thread.ready), start)
}

export { SUSPEND_BYTES }

/**
 * One activation on a pool thread: start the guest, answer its host calls one at a time through
 * `perform`, and take its output — within the compute budget, which counts only the time the
 * guest has control (not the time Brain spends performing its host calls).
 *
 * - The budget passes, the thread dies, or the activation is interrupted (a cancel the guest
 *   ignored past its grace, a server stop): the thread is terminated and replaced; the guest never
 *   runs on after its activation is over.
 * - A trap, a link error, a `brain.fail`, ABI misuse: the activation fails with the reason; the
 *   thread is fine (its instance is simply dropped) and goes back to the pool.
 */
import { Clock, Duration, Effect, Option, Queue } from "effect"
import type { MemoryLimits } from "../../services/WasmHost.js"
import { PAGE_BYTES } from "./Module.js"
import type { GuestThread, Pool, ThreadEvent } from "./Pool.js"

export interface ActivationLimits {
  /** Milliseconds the guest may run, host calls excluded; 0 = no bound. */
  readonly computeMs: number
  /** Bytes of input, output and each host request. */
  readonly ioBytes: number
  /** Bytes of guest memory at most. */
  readonly memoryBytes: number
}

/** Why an activation did not give an output. */
export type ActivationFailure =
  | { readonly _tag: "budget"; readonly message: string }
  | { readonly _tag: "guest"; readonly message: string }

export interface Activation {
  /** The module's content hash: a worker keeps modules it has been sent by it. */
  readonly moduleId: string
  readonly module: WebAssembly.Module
  readonly memory: MemoryLimits
  readonly entry: "brain_run" | "brain_tool"
  /**
   * The input JSON as UTF-8 (`jsonBytes`). Its buffer is handed to the worker, so the caller keeps
   * no copy: a turn with a big transcript holds it on no JavaScript heap while the guest runs.
   */
  readonly input: Uint8Array
  /** Performs one host call; the answer's JSON text (never fails: errors are answers too). */
  readonly perform: (op: string, request: string) => Effect.Effect<string>
}

const encoder = new TextEncoder()
/** The worker checks every payload it sends is well-formed UTF-8. */
const decoder = new TextDecoder()

/** A value's JSON as UTF-8 in a buffer of its own (it is transferred, so never a pooled Buffer). */
export const jsonBytes = (value: unknown): Uint8Array => encoder.encode(JSON.stringify(value))

export const activate = (pool: Pool, activation: Activation, limits: ActivationLimits): Effect.Effect<string, ActivationFailure> =>
  Effect.uninterruptibleMask((restore) =>
    Effect.gen(function*() {
      if (activation.input.byteLength > limits.ioBytes) {
        return yield* Effect.fail<ActivationFailure>({
          _tag: "guest",
          message: `the activation's input is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`
        })
      }
      const thread = yield* restore(pool.acquire)
      let healthy = false
      return yield* restore(run(thread, activation, limits, () => void (healthy = true))).pipe(
        Effect.ensuring(Effect.suspend(() => pool.release(thread, healthy)))
      )
    })
  )

const run = (thread: GuestThread, activation: Activation, limits: ActivationLimits, fine: () => void) =>
  Effect.gen(function*() {
    const inbox = yield* Queue.unbounded<ThreadEvent>()
    thread.listener = (event) => void Queue.unsafeOffer(inbox, event)
    const maxPages = Math.floor(limits.memoryBytes / PAGE_BYTES)
    thread.start({
      type: "activate",
      moduleId: activation.moduleId,
      entry: activation.entry,
      input: activation.input,
      memory: {
        initial: activation.memory.initial,
        maximum: Math.max(activation.memory.initial, Math.min(maxPages, activation.memory.maximum ?? maxPages))
      },
      maxRequestBytes: limits.ioBytes
    }, activation.module)
    let remaining = limits.computeMs
    for (;;) {
      const before = yield* Clock.currentTimeMillis
      const next = limits.computeMs > 0
        ? yield* Effect.timeoutOption(Queue.take(inbox), Duration.millis(Math.max(0, remaining)))
        : Option.some(yield* Queue.take(inbox))
      if (Option.isNone(next)) {
        return yield* Effect.fail<ActivationFailure>({
          _tag: "budget",
          message: `the guest ran past its compute budget of ${limits.computeMs} ms (BRAIN_MAX_WASM_COMPUTE_MS) and was stopped`
        })
      }
      remaining -= (yield* Clock.currentTimeMillis) - before
      const event = next.value
      switch (event.type) {
        case "call":
          thread.answer(encoder.encode(yield* activation.perform(event.op, decoder.decode(event.request))))
          continue
        case "done":
          fine()
          if (event.output.byteLength > limits.ioBytes) {
            return yield* Effect.fail<ActivationFailure>({
              _tag: "guest",
              message: `the guest's output is above BRAIN_MAX_WASM_IO_BYTES (${limits.ioBytes})`
            })
          }
          return decoder.decode(event.output)
        case "failed":
          if (event.kind !== "error") fine()
          return yield* Effect.fail<ActivationFailure>({ _tag: "guest", message: describe(event.kind, event.reason) })
        case "died":
          return yield* Effect.fail<ActivationFailure>({ _tag: "guest", message: event.reason })
      }
    }
  })

const describe = (kind: "guest" | "trap" | "link" | "error", reason: string) =>
  kind === "trap"
    ? `the guest trapped: ${reason}`
    : kind === "link"
    ? `the guest could not be instantiated: ${reason}`
    : kind === "guest"
    ? reason
    : `the guest failed: ${reason}`

/**
 * A tool call's stop (services/Tools.ts, `ToolInvocation.stop`): Brain stops a call on the turn's
 * cancel or the call's own deadline. Brain's own executors (a Wasm tool, an Environment's call)
 * listen with `onAbort`, a plain list of callbacks; the call's AbortSignal, which Node builds on an
 * EventTarget (making it, and adding and removing a listener, cost several µs each), is made only
 * when an executor reads `signal` (an embedder's in-process tool), aborted already if the stop came
 * first. Every call had one before, and a tool-loop turn has eight calls.
 */
import type { Stop } from "../services/Tools.js"

const nothing = () => {}

export class CallStop implements Stop {
  #stopped = false
  #reason: unknown = undefined
  #listeners: Array<() => void> | undefined = undefined
  #controller: AbortController | undefined = undefined
  #notStarted = false

  get aborted(): boolean {
    return this.#stopped
  }

  /** The call's AbortSignal, made on first read. */
  get signal(): AbortSignal {
    if (this.#controller === undefined) {
      this.#controller = new AbortController()
      if (this.#stopped) this.#controller.abort(this.#reason)
    }
    return this.#controller.signal
  }

  onAbort(listener: () => void): () => void {
    if (this.#stopped) {
      listener()
      return nothing
    }
    const listeners = (this.#listeners ??= [])
    listeners.push(listener)
    // Removed in place (not spliced out), so that a listener that removes another while the stop
    // calls them neither calls the removed one nor skips the next.
    return () => {
      const i = listeners.indexOf(listener)
      if (i >= 0) listeners[i] = nothing
    }
  }

  /** The executor says it was stopped before its work began (`Stop.notStarted`). */
  notStarted(): void {
    this.#notStarted = true
  }

  /** Whether the executor said its work never began. */
  get neverStarted(): boolean {
    return this.#notStarted
  }

  /** Stops the call (once: a later abort changes nothing): the signal, if made, then each listener. */
  abort(reason: unknown): void {
    if (this.#stopped) return
    this.#stopped = true
    this.#reason = reason
    this.#controller?.abort(reason)
    const listeners = this.#listeners
    this.#listeners = undefined
    if (listeners !== undefined) for (const listener of listeners) listener()
  }
}

/** An invocation's stop: its own, or one that follows its signal (an invocation made with a signal only). */
export const stopOf = (invocation: { readonly stop?: Stop; readonly signal: AbortSignal }): Stop =>
  invocation.stop ?? {
    get aborted() {
      return invocation.signal.aborted
    },
    onAbort: (listener) => {
      const signal = invocation.signal
      if (signal.aborted) {
        listener()
        return nothing
      }
      signal.addEventListener("abort", listener, { once: true })
      return () => signal.removeEventListener("abort", listener)
    }
  }

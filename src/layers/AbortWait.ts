/**
 * Waiting for a forked call or an abort, whichever comes first, with one callback each way rather
 * than a race of two fibers (a race forks a fiber per side and interrupts the loser). The tool
 * executors use it: a remote tool's answer against Host's abort (sessions/RemoteTool.ts), a Wasm
 * tool's activation against it (ToolsLive.ts).
 */
import { Effect, type Exit, type Fiber } from "effect"

export type ExitOrAbort<A, E> = { readonly _tag: "answer"; readonly exit: Exit.Exit<A, E> } | { readonly _tag: "abort" }

/**
 * Whichever is first: `fiber`'s exit (the call's answer) or the abort of `signal`; an answer
 * already there wins. Neither side is stopped here: the caller decides what an abort does to
 * the fiber.
 */
export const exitOrAbort = <A, E>(fiber: Fiber.RuntimeFiber<A, E>, signal: AbortSignal): Effect.Effect<ExitOrAbort<A, E>> =>
  Effect.async<ExitOrAbort<A, E>>((resume) => {
    const done = fiber.unsafePoll()
    if (done !== null) return resume(Effect.succeed({ _tag: "answer", exit: done }))
    if (signal.aborted) return resume(Effect.succeed({ _tag: "abort" }))
    let settled = false
    const stop = () => {
      signal.removeEventListener("abort", onAbort)
      fiber.removeObserver(onExit)
    }
    const settle = (first: ExitOrAbort<A, E>) => {
      if (settled) return
      settled = true
      stop()
      resume(Effect.succeed(first))
    }
    const onExit = (exit: Exit.Exit<A, E>) => settle({ _tag: "answer", exit })
    const onAbort = () => settle({ _tag: "abort" })
    signal.addEventListener("abort", onAbort, { once: true })
    fiber.addObserver(onExit)
    return Effect.sync(stop)
  })

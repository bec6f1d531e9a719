/**
 * Effects composed at once when they have already ended. An `Exit` is an effect whose result is
 * known; these apply the next step to it here, in this call, and answer an `Exit` again, where
 * `Effect.flatMap` and `Effect.match` would wait for a fiber to run them. A caller that finds an
 * `Exit` needs no fiber at all (a Wasm tool that ran to its end inline: ToolCalls.ts).
 */
import { Cause, Effect, Either, Exit } from "effect"

/** `Effect.flatMap`, applied now when `effect` has ended. */
export const flatMapNow = <A, E, R, B, E2, R2>(effect: Effect.Effect<A, E, R>, f: (a: A) => Effect.Effect<B, E2, R2>): Effect.Effect<B, E | E2, R | R2> => {
  if (!Exit.isExit(effect)) return Effect.flatMap(effect, f)
  const exit = effect as Exit.Exit<A, E>
  return Exit.isSuccess(exit) ? f(exit.value) : Exit.failCause(exit.cause)
}

/** `Effect.match`, applied now when `effect` has ended (an `Exit` then too). */
export const matchNow = <A, E, R, B, C>(
  effect: Effect.Effect<A, E, R>,
  options: { readonly onFailure: (e: E) => C; readonly onSuccess: (a: A) => B }
): Effect.Effect<B | C, never, R> => {
  if (!Exit.isExit(effect)) return Effect.match(effect, options)
  const exit = effect as Exit.Exit<A, E>
  if (Exit.isSuccess(exit)) return Exit.succeed(options.onSuccess(exit.value))
  const failed = Cause.failureOrCause(exit.cause)
  return Either.isLeft(failed) ? Exit.succeed(options.onFailure(failed.left)) : Exit.failCause(failed.right)
}

/**
 * The `http` driver of Environments (docs/environments.md): each operation is one POST to the
 * Environment the session recorded at creation, sent once and never retried.
 *
 * - Where: `resolved.base_url`, recorded in `session_creation_started`. Credentials come from the
 *   binding as configured now, and only while it still has that base URL: a binding that is gone
 *   or points elsewhere fails the operation before anything is sent (`EnvironmentNotSent`), so a
 *   token never goes to a service it was not configured for.
 * - How long: setup, detach and teardown are bounded by the recorded `lifecycle_timeout_ms`
 *   (beyond it: `EnvironmentUncertain` `timeout`, and the request is closed); a tool call has no
 *   bound of its own (its caller races it against the deadline and the turn, and interrupting it
 *   closes the request); a cancel is bounded by `graceMs`.
 * - What comes back: environments/Exchange.ts reads it with its bound, environments/Answers.ts
 *   says what it means. Everything an Environment sent back has the binding's secret values
 *   replaced by `<redacted>` before it reaches a result, an output or a failure.
 *
 * Only `http` Environments are this driver's: any other is `EnvironmentNotSent`
 * `driver_unavailable`.
 */
import * as NodeHttpClient from "@effect/platform-node/NodeHttpClient"
import { Duration, Effect, Either, Exit, Layer, Redacted } from "effect"
import {
  type AdmittedEnvironment,
  type EnvironmentAnswer,
  type EnvironmentBindings,
  readAnswer,
  readCancelAnswer,
  resolve,
  sameBaseUrl
} from "../domain/Environment.js"
import { ServerConfig } from "../services/ServerConfig.js"
import {
  EnvironmentBindings as ConfiguredBindings,
  type CallAnswer,
  type CancelAnswer,
  type EnvironmentCall,
  type EnvironmentFailed,
  EnvironmentNotSent,
  EnvironmentRefused,
  Environments,
  type EnvironmentsShape,
  EnvironmentUncertain,
  type LifecycleEnded,
  type LifecycleOperation,
  type LifecycleStep,
  type SentCall
} from "../services/Environments.js"
import { readReply, type Reading } from "./environments/Answers.js"
import { exchange, exchangeNow, type Post } from "./environments/Exchange.js"
import { keyRedacted } from "../domain/ModelBinding.js"

export interface EnvironmentsHttpOptions {
  /** BRAIN_ENVIRONMENTS, parsed: the bindings as configured now (credentials included). */
  readonly bindings: EnvironmentBindings
  /** Bytes of a 200 answer read at most (BRAIN_MAX_ENVIRONMENT_RESPONSE_BYTES): beyond, the read stops. */
  readonly maxResponseBytes: number
  /** Milliseconds a cancel may take to be confirmed (BRAIN_CANCEL_GRACE_MS). */
  readonly graceMs: number
}

/** Where an operation goes and what it carries, once the binding has been checked. */
interface Target {
  readonly environment: string
  readonly baseUrl: string
  readonly lifecycleTimeoutMs: number
  readonly secretHeaders: ReadonlyArray<readonly [string, Redacted.Redacted]>
  /** The secret values, to be redacted from whatever comes back. */
  readonly secrets: ReadonlyArray<string>
}

const notSent = (environment: string, reason: EnvironmentNotSent["reason"], why: string) =>
  new EnvironmentNotSent({ environment, reason, message: `Environment ${JSON.stringify(environment)}: ${why}; nothing was sent` })

/** The recorded place of `environment`, with the credentials its binding holds now. */
const targetOf = (bindings: EnvironmentBindings, environment: AdmittedEnvironment): Either.Either<Target, EnvironmentNotSent> => {
  if (environment.driver !== "http") {
    return Either.left(notSent(environment.name, "driver_unavailable", `the http driver cannot run a ${environment.driver} Environment`))
  }
  const bound = bindings.get(environment.binding)
  if (bound === undefined) {
    return Either.left(notSent(environment.name, "binding_missing", `its binding ${JSON.stringify(environment.binding)} is no longer configured (BRAIN_ENVIRONMENTS)`))
  }
  if (!sameBaseUrl(environment.resolved.base_url, resolve(bound.binding).base_url)) {
    return Either.left(notSent(environment.name, "binding_moved", `its binding ${JSON.stringify(environment.binding)} now points elsewhere than the session recorded`))
  }
  const secretHeaders: Array<readonly [string, Redacted.Redacted]> = [...bound.headers]
  if (bound.token !== undefined) secretHeaders.push(["authorization", Redacted.make(`Bearer ${Redacted.value(bound.token)}`)])
  // A value shorter than MIN_REDACTED_KEY_CHARS is a placeholder, not a secret worth mangling
  // every answer for (a one-character token would replace that character everywhere): as a model key.
  const secrets = [...bound.headers.map(([, v]) => Redacted.value(v)), ...(bound.token !== undefined ? [Redacted.value(bound.token)] : [])].filter(keyRedacted)
  return Either.right({
    environment: environment.name,
    baseUrl: environment.resolved.base_url,
    lifecycleTimeoutMs: environment.resolved.lifecycle_timeout_ms,
    secretHeaders,
    // Longest first, so that a secret holding another is replaced whole.
    secrets: secrets.sort((a, b) => b.length - a.length)
  })
}

export const make = (options: EnvironmentsHttpOptions): Effect.Effect<EnvironmentsShape, never, NodeHttpClient.Dispatcher> =>
  Effect.gen(function*() {
    const dispatcher = yield* NodeHttpClient.Dispatcher

    /** The POST of `body` to `path` of `target`. */
    const postOf = (target: Target, path: string, body: unknown): Post => ({
      environment: target.environment,
      baseUrl: target.baseUrl,
      path,
      body,
      secretHeaders: target.secretHeaders,
      maxBytes: options.maxResponseBytes
    })

    /** What a reply from `target` to `path` means, read with `shape` (a tool call's: `outputDepthChecked`). */
    const readingOf = <A>(target: Target, path: string, shape: Reading<A>["shape"]): Reading<A> =>
      path === "/tools/call"
        ? { environment: target.environment, path, secrets: target.secrets, shape, outputDepthChecked: true }
        : { environment: target.environment, path, secrets: target.secrets, shape }

    /** One POST to `path` and what its reply means, read with `shape`. */
    const send = <A>(target: Target, path: string, body: unknown, shape: Reading<A>["shape"]) =>
      exchange(dispatcher, postOf(target, path, body)).pipe(
        Effect.flatMap((reply) => readReply(reply, readingOf(target, path, shape)))
      )

    const lifecycle = (step: LifecycleStep) => (operation: LifecycleOperation): Effect.Effect<LifecycleEnded, EnvironmentFailed> =>
      Effect.gen(function*() {
        const target = yield* targetOf(options.bindings, operation.environment)
        const body = {
          session_id: operation.session,
          sequence: operation.sequence,
          environment: target.environment,
          ...(step === "setup" ? { options: operation.environment.options ?? {} } : {})
        }
        const answer = yield* send(target, `/${step}`, body, readAnswer).pipe(
          Effect.timeoutFail({
            duration: Duration.millis(target.lifecycleTimeoutMs),
            onTimeout: () =>
              new EnvironmentUncertain({
                environment: target.environment,
                reason: "timeout",
                message: `Environment ${JSON.stringify(target.environment)} did not answer /${step} within ${target.lifecycleTimeoutMs} ms ` +
                  "(lifecycle_timeout_ms)"
              })
          })
        )
        if ("ok" in answer) return { result: answer.ok }
        return yield* Effect.fail(
          new EnvironmentRefused({
            environment: target.environment,
            status: 200,
            body: answer.error,
            message: `Environment ${JSON.stringify(target.environment)} answered /${step} with an error`
          })
        )
      }).pipe(Effect.withSpan(`Environments.${step}`))

    /** A tool call's request body to `target`. */
    const callBody = (target: Target, call: EnvironmentCall) => ({
      session_id: call.session,
      sequence: call.sequence,
      environment: target.environment,
      name: call.name,
      call_id: call.callId,
      input: call.input,
      deadline_at_ms: call.deadlineAtMs
    })
    const callAnswerOf = (answer: EnvironmentAnswer): CallAnswer => ("ok" in answer ? { outcome: "ok", output: answer.ok } : { outcome: "error", output: answer.error })

    /** A tool call's POST to `target` and what its answer means. */
    const callTo = (target: Target, call: EnvironmentCall): Effect.Effect<CallAnswer, EnvironmentFailed> =>
      Effect.map(send(target, "/tools/call", callBody(target, call), readAnswer), callAnswerOf)

    const call: EnvironmentsShape["call"] = Effect.fn("Environments.call")(function*(call) {
      return yield* callTo(yield* targetOf(options.bindings, call.environment), call)
    })

    /**
     * `call` sent now, with no fiber and no Effect (environments/Exchange.ts, `exchangeNow`), its
     * answer by callback: the caller (RemoteNow.ts) waits with no fiber, and only a cancel or a
     * deadline starts one. Abandoning it leaves the exchange, which closes the request, as
     * interrupting `call` does.
     */
    const sendCall: NonNullable<EnvironmentsShape["send"]> = (c) => {
      const target = targetOf(options.bindings, c.environment)
      if (Either.isLeft(target)) return target.left
      const t = target.right
      let exit: Exit.Exit<CallAnswer, EnvironmentFailed> | undefined
      let listener: ((exit: Exit.Exit<CallAnswer, EnvironmentFailed>) => void) | undefined
      const leave = exchangeNow(dispatcher, postOf(t, "/tools/call", callBody(t, c)), (exchanged) => {
        const read: Either.Either<EnvironmentAnswer, EnvironmentFailed> = Either.isLeft(exchanged)
          ? Either.left(exchanged.left)
          : readReply(exchanged.right, readingOf(t, "/tools/call", readAnswer))
        exit = Either.isLeft(read) ? Exit.fail(read.left) : Exit.succeed(callAnswerOf(read.right))
        listener?.(exit)
      })
      return {
        await: (f) => {
          listener = f
          if (exit !== undefined) f(exit)
        },
        abandon: () => {
          listener = undefined
          leave()
        }
      } satisfies SentCall
    }

    const cancel: EnvironmentsShape["cancel"] = Effect.fn("Environments.cancel")(function*(request) {
      const target = yield* targetOf(options.bindings, request.environment)
      const body = {
        session_id: request.session,
        sequence: request.sequence,
        environment: target.environment,
        name: request.name,
        reason: request.reason
      }
      const stopped = yield* send(target, "/tools/cancel", body, readCancelAnswer).pipe(
        Effect.timeoutFail({
          duration: Duration.millis(options.graceMs),
          onTimeout: () =>
            new EnvironmentUncertain({
              environment: target.environment,
              reason: "timeout",
              message: `Environment ${JSON.stringify(target.environment)} did not answer /tools/cancel within ${options.graceMs} ms ` +
                "(BRAIN_CANCEL_GRACE_MS)"
            })
        })
      )
      return (stopped
        ? { confirmed: true }
        : { confirmed: false, why: `Environment ${JSON.stringify(target.environment)} answered {"stopped": false}` }) satisfies CancelAnswer
    }, (effect) => Effect.catchAll(effect, (e): Effect.Effect<CancelAnswer> => Effect.succeed({ confirmed: false, why: e.message })))

    return {
      setup: lifecycle("setup"),
      detach: lifecycle("detach"),
      teardown: lifecycle("teardown"),
      call,
      send: sendCall,
      cancel
    } satisfies EnvironmentsShape
  })

export const layer = (options: EnvironmentsHttpOptions): Layer.Layer<Environments, never, NodeHttpClient.Dispatcher> =>
  Layer.effect(Environments, make(options))

/** The driver over the server's bindings (BRAIN_ENVIRONMENTS) and settings. */
export const makeConfigured: Effect.Effect<EnvironmentsShape, never, NodeHttpClient.Dispatcher | ConfiguredBindings | ServerConfig> = Effect.gen(
  function*() {
    const bindings = yield* ConfiguredBindings
    const config = yield* ServerConfig
    return yield* make({ bindings, maxResponseBytes: config.maxEnvironmentResponseBytes, graceMs: config.cancelGraceMs })
  }
)

export const layerConfigured: Layer.Layer<Environments, never, NodeHttpClient.Dispatcher | ConfiguredBindings | ServerConfig> = Layer.effect(
  Environments,
  makeConfigured
)

/**
 * A host's tool call sent with no fiber (src/layers/sessions/RemoteNow.ts), as the fence sees it
 * (`Dispatching`): its answer, when it comes first, is its verdict; interrupted first (the round's
 * caller was), it stops waiting — the sent call is abandoned, it ends interrupted, which the fence
 * records `unknown` — and an answer that comes after changes nothing.
 */
import { describe, expect, it } from "vitest"
import { Effect, Exit } from "effect"
import type { AdmittedEnvironment } from "../../src/domain/Environment.js"
import type { SessionId } from "../../src/domain/Ids.js"
import { cancelSignal } from "../../src/layers/sessions/Cell.js"
import { remoteNowOf } from "../../src/layers/sessions/RemoteNow.js"
import type { ToolCallContext } from "../../src/layers/sessions/ToolCalls.js"
import type { ToolVerdict } from "../../src/layers/sessions/ToolVerdicts.js"
import { isDispatching } from "../../src/services/EffectFence.js"
import type { CallAnswer, EnvironmentUncertain, EnvironmentsShape, SentCall } from "../../src/services/Environments.js"
import * as ServerConfig from "../../src/services/ServerConfig.js"

const SESSION = "ses_0000000000000000000000000b" as SessionId
const HOST: AdmittedEnvironment = { name: "box", driver: "host", host: "host_1" } as AdmittedEnvironment

/** A call sent to a fake host: its answer is given by the test (`answer`); `abandoned` once waiting stopped. */
const sentTo = () => {
  const state: { listener?: (answer: Exit.Exit<CallAnswer, EnvironmentUncertain>) => void; abandoned: boolean } = { abandoned: false }
  const sent: SentCall = {
    await: (f) => void (state.listener = f),
    abandon: () => void (state.abandoned = true)
  }
  return { sent, state, answer: (a: Exit.Exit<CallAnswer, EnvironmentUncertain>) => state.listener?.(a) }
}

/** The call as remoteNowOf sends it, over the smallest context it reads. */
const dispatched = (sent: SentCall) => {
  const signal = cancelSignal()
  const environments = { send: () => sent } as unknown as EnvironmentsShape
  const ctx = {
    deps: { environments, config: ServerConfig.defaults },
    scope: { cell: { session: SESSION }, signal },
    emitAs: () => Effect.succeed(1)
  } as unknown as ToolCallContext
  const runtime = Effect.runSync(Effect.runtime<never>())
  const now = remoteNowOf(ctx, { id: "call_1", name: "lookup", input: {} }, undefined, HOST, undefined, undefined, 7, () => true, runtime)
  if (now === undefined || !isDispatching(now)) throw new Error("the call was not sent with no fiber")
  const ends: Array<Exit.Exit<ToolVerdict>> = []
  now.onEnd((exit) => void ends.push(exit))
  return { dispatching: now, ends, signal }
}

describe("a host call sent with no fiber", () => {
  it("its answer, first, is its verdict, given once", () => {
    const { answer, sent } = sentTo()
    const { ends, signal } = dispatched(sent)
    expect(ends).toEqual([])
    answer(Exit.succeed({ outcome: "ok", output: { n: 1 } }))
    answer(Exit.succeed({ outcome: "ok", output: { n: 2 } }))
    expect(ends).toHaveLength(1)
    expect(ends[0]).toEqual(Exit.succeed({ _tag: "reply", reply: { outcome: "ok", output: { n: 1 } } }))
    // Settled: it no longer listens for the turn's cancel.
    expect(signal.listeners.size).toBe(0)
  })

  it("interrupted first, it abandons the sent call and ends interrupted, never with an answer that comes after", () => {
    const { answer, sent, state } = sentTo()
    const { dispatching, ends, signal } = dispatched(sent)
    dispatching.interrupt()
    expect(state.abandoned).toBe(true)
    expect(ends).toHaveLength(1)
    expect(Exit.isInterrupted(ends[0]!)).toBe(true)
    expect(signal.listeners.size).toBe(0)
    answer(Exit.succeed({ outcome: "ok", output: "late" }))
    expect(ends).toHaveLength(1)
    expect(Exit.isInterrupted(ends[0]!)).toBe(true)
  })
})

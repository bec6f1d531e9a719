/**
 * The fence over the Journal. The started commit and the outcome commit run uninterruptibly;
 * only the dispatch itself can be interrupted. The outcome commit is bounded by the cleanup
 * deadline: if the disk does not answer in time the caller is released and the record, if it
 * never lands, is recovered later as an ambiguous failure.
 */
import { Duration, Effect, Layer } from "effect"
import { Journal } from "../services/Journal.js"
import { EffectFence, type EffectFenceShape } from "../services/EffectFence.js"
import { ServerConfig } from "../services/ServerConfig.js"

export const make = Effect.gen(function*() {
  const journal = yield* Journal
  const config = yield* ServerConfig
  const fence: EffectFenceShape["fence"] = (session, started, dispatch, outcome, onCommit) =>
    Effect.uninterruptibleMask((restore) =>
      Effect.gen(function*() {
        const [seq] = yield* journal.append(session, [started])
        onCommit?.([[seq!, started]])
        let dispatched = false
        const exit = yield* Effect.exit(
          restore(Effect.suspend(() => {
            dispatched = true
            return dispatch(seq!)
          }))
        )
        const closing = outcome(seq!, exit, dispatched)
        const committed = yield* journal.append(session, [closing]).pipe(
          Effect.disconnect,
          Effect.timeoutOption(Duration.millis(config.cleanupDeadlineMs)),
          Effect.either
        )
        if (committed._tag === "Left") return yield* Effect.fail(committed.left)
        const outcomeSeq = committed.right._tag === "Some" ? committed.right.value[0] : undefined
        if (outcomeSeq !== undefined) onCommit?.([[outcomeSeq, closing]])
        return { started: seq!, exit, dispatched, outcome: outcomeSeq }
      })
    )
  return { fence } satisfies EffectFenceShape
})

export const layer = Layer.effect(EffectFence, make)

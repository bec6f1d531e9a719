/**
 * Model stand-ins for runtime tests.
 */
import { Deferred, Effect } from "effect"
import type { ModelsShape } from "../../src/services/Models.js"

/**
 * A model whose first call waits: `reached` completes when the call arrives, and the call answers
 * (text, no tool calls) once the test completes `proceed`; later calls answer at once.
 */
export const firstCallHeld = Effect.gen(function*() {
  const reached = yield* Deferred.make<void>()
  const proceed = yield* Deferred.make<void>()
  let calls = 0
  const models: ModelsShape = {
    call: () =>
      Effect.gen(function*() {
        if (calls++ === 0) {
          yield* Deferred.succeed(reached, undefined)
          yield* Deferred.await(proceed)
        }
        return { text: "answer", tool_calls: [], stop_reason: "end" as const }
      })
  }
  return { models, reached, proceed }
})

/**
 * The answer memory (BRAIN_ANSWER_BYTES, src/http/AnswerMemory.ts): an answer holds its weight for
 * as long as its scope (the response) lasts and gives it back when the scope closes, whatever ends
 * it; one that does not fit beside those held is refused `overloaded` at once, having taken
 * nothing; one larger than the whole bound takes the whole bound, so it is served alone.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { AnswerMemory } from "../../src/http/AnswerMemory.js"

const holdIn = (memory: AnswerMemory, weight: number) =>
  Effect.gen(function*() {
    const scope = yield* Scope.make()
    const exit = yield* Effect.exit(Scope.extend(memory.hold(weight, "this answer"), scope))
    return { scope, exit }
  })

describe("the answer memory", () => {
  it.effect("holds each answer's weight until its scope closes, refuses at once what does not fit, and takes it again once given back", () =>
    Effect.gen(function*() {
      const memory = new AnswerMemory(100)
      const a = yield* holdIn(memory, 60)
      expect(Exit.isSuccess(a.exit)).toBe(true)
      expect(memory.held).toBe(60)
      const b = yield* holdIn(memory, 50)
      expect(Exit.isFailure(b.exit)).toBe(true)
      if (Exit.isFailure(b.exit)) {
        const error = JSON.stringify(b.exit.cause)
        expect(error).toContain("Overloaded")
        expect(error).toContain("BRAIN_ANSWER_BYTES")
      }
      expect(memory.held).toBe(60)
      const c = yield* holdIn(memory, 40)
      expect(Exit.isSuccess(c.exit)).toBe(true)
      expect(memory.held).toBe(100)
      yield* Scope.close(a.scope, Exit.void)
      expect(memory.held).toBe(40)
      // A scope closed by a failure or an interruption gives its share back too.
      yield* Scope.close(c.scope, Exit.interrupt(0 as never))
      expect(memory.held).toBe(0)
      const d = yield* holdIn(memory, 50)
      expect(Exit.isSuccess(d.exit)).toBe(true)
      yield* Scope.close(d.scope, Exit.void)
      yield* Scope.close(b.scope, Exit.void)
      expect(memory.held).toBe(0)
    }))

  it.effect("an answer larger than the whole bound takes the whole bound: served alone, refused beside another", () =>
    Effect.gen(function*() {
      const memory = new AnswerMemory(100)
      const big = yield* holdIn(memory, 1_000)
      expect(Exit.isSuccess(big.exit)).toBe(true)
      expect(memory.held).toBe(100)
      const small = yield* holdIn(memory, 1)
      expect(Exit.isFailure(small.exit)).toBe(true)
      yield* Scope.close(big.scope, Exit.void)
      expect(memory.held).toBe(0)
      const other = yield* holdIn(memory, 10)
      const again = yield* holdIn(memory, 1_000)
      expect(Exit.isFailure(again.exit)).toBe(true)
      yield* Scope.close(other.scope, Exit.void)
    }))
})

/**
 * Effects composed at once when they have already ended (src/layers/Now.ts): for any effect that
 * succeeds, fails or dies, `flatMapNow` and `matchNow` give the result `Effect.flatMap` and
 * `Effect.match` give; and given an `Exit` they answer an `Exit` themselves, having applied the
 * next step in the call (no fiber needed to learn the result).
 */
import { describe, expect, it } from "@effect/vitest"
import { Cause, Effect, Exit } from "effect"
import fc from "fast-check"
import { flatMapNow, matchNow } from "../../src/layers/Now.js"

type Ending = { readonly tag: "succeed"; readonly value: number } | { readonly tag: "fail"; readonly error: string } | { readonly tag: "die"; readonly defect: string }

const ending: fc.Arbitrary<Ending> = fc.oneof(
  fc.integer().map((value) => ({ tag: "succeed", value }) as const),
  fc.string().map((error) => ({ tag: "fail", error }) as const),
  fc.string().map((defect) => ({ tag: "die", defect }) as const)
)

/** The ending as an Exit (already ended), or as an effect that ends so only when run (an async step first). */
const effectOf = (e: Ending, ended: boolean): Effect.Effect<number, string> => {
  const exit: Exit.Exit<number, string> = e.tag === "succeed" ? Exit.succeed(e.value) : e.tag === "fail" ? Exit.fail(e.error) : Exit.die(e.defect)
  return ended ? exit : Effect.flatMap(Effect.yieldNow(), () => exit)
}

const run = <A, E>(effect: Effect.Effect<A, E>) => Effect.runPromiseExit(effect)

describe("Now", () => {
  it("flatMapNow gives Effect.flatMap's result for every ending of both steps, and an Exit at once when both have ended", async () => {
    await fc.assert(fc.asyncProperty(ending, ending, fc.boolean(), fc.boolean(), async (first, second, firstEnded, secondEnded) => {
      // The next step: an Exit when `secondEnded` (its value from n), else an effect that ends so when run.
      const f = (n: number): Effect.Effect<number, string> => effectOf(second.tag === "succeed" ? { tag: "succeed", value: n * 31 + second.value } : second, secondEnded)
      const now = flatMapNow(effectOf(first, firstEnded), f)
      const expected = await run(Effect.flatMap(effectOf(first, firstEnded), f))
      expect(await run(now)).toEqual(expected)
      if (firstEnded && (first.tag !== "succeed" || secondEnded)) {
        expect(Exit.isExit(now)).toBe(true)
        expect(now).toEqual(expected)
      }
    }))
  })

  it("matchNow gives Effect.match's result for every ending (a defect passes through untouched), and an Exit at once when the effect has ended", async () => {
    await fc.assert(fc.asyncProperty(ending, fc.boolean(), async (e, ended) => {
      const options = { onFailure: (error: string) => `failed: ${error}`, onSuccess: (n: number) => n + 1 }
      const now = matchNow(effectOf(e, ended), options)
      const expected = await run(Effect.match(effectOf(e, ended), options))
      expect(await run(now)).toEqual(expected)
      if (e.tag === "die") expect(Exit.isFailure(expected) && Cause.isDie(expected.cause)).toBe(true)
      expect(Exit.isExit(now)).toBe(ended)
      if (ended) expect(now).toEqual(expected)
    }))
  })
})

/**
 * The in-process executor's answers for a call it has no handler for: a tool the session never
 * declared and a declared tool nothing runs are both the call's `error` outcome, each saying which
 * it is (a declared tool needs an environment or a module), so a model and an operator can tell them apart.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import * as ToolsInProcess from "../../src/layers/ToolsInProcess.js"
import type { SessionId } from "../../src/domain/Ids.js"

const invocation = (name: string, declared: boolean) => ({
  session: "ses_x" as SessionId,
  sequence: 5,
  call: { id: "c-1", name, input: {} },
  definition: declared ? { name } : undefined,
  deadlineAtMs: undefined,
  signal: new AbortController().signal,
  emit: () => Effect.die("no emit here"),
  telemetry: () => Effect.void
})
const outputOf = (reply: { readonly outcome: string }) => JSON.stringify("output" in reply ? reply.output : undefined)

describe("the in-process executor without a handler", () => {
  it.effect("an undeclared tool is an error naming it as undeclared; a declared tool nothing runs is an error saying it needs an environment or a module; a handled one runs", () =>
    Effect.gen(function*() {
      const tools = ToolsInProcess.make({ echo: ToolsInProcess.succeedAfter(0) })
      const ghost = yield* tools.invoke(invocation("ghost", false))
      expect(ghost.outcome).toBe("error")
      expect(outputOf(ghost)).toMatch(/no tool named \\"ghost\\": the session declares none/)
      const loose = yield* tools.invoke(invocation("loose", true))
      expect(loose.outcome).toBe("error")
      expect(outputOf(loose)).toMatch(/declared, but nothing runs it.*environment.*module/)
      expect(yield* tools.invoke(invocation("echo", true))).toEqual({ outcome: "ok", output: {} })
      // A handler for a tool the session did not declare is not run.
      expect((yield* tools.invoke(invocation("echo", false))).outcome).toBe("error")
    }))
})

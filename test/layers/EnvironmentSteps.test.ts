/**
 * Which Environments a delete must tear down, read from the journal (`standing`): every one whose
 * setup was started, except one whose setup failed before anything reached it, until a teardown
 * of it ends.
 */
import { describe, expect, it } from "@effect/vitest"
import { failure } from "../../src/domain/Failure.js"
import type { JournalRecord } from "../../src/domain/Records.js"
import { standing } from "../../src/layers/sessions/EnvironmentSteps.js"
import { EnvironmentNotSent, EnvironmentRefused, EnvironmentUncertain } from "../../src/services/Environments.js"

const record = (sequence: number, kind: string, payload: unknown) => ({ sequence, recorded_at_ms: 0, kind, payload }) as JournalRecord
const setupFailing = (environment: string, f: unknown) => [
  record(1, "environment_setup_started", { environment, request: {} }),
  record(2, "environment_setup_failed", { sequence: 1, failure: f })
]

describe("standing: the Environments a delete tears down", () => {
  it("a setup that failed before anything reached the Environment (not sent, or abandoned unsent) leaves nothing standing", () => {
    for (const reason of ["unreachable", "binding_missing", "driver_unavailable"] as const) {
      const f = new EnvironmentNotSent({ environment: "e", reason, message: "nothing was sent" }).failure
      expect([...standing(setupFailing("e", f))]).toEqual([])
    }
    expect([...standing(setupFailing("e", failure("interrupted", "abandoned", { ambiguous: false })))]).toEqual([])
  })

  it("a setup the Environment refused, or that may have run (ambiguous, or interrupted by a restart), stands until a teardown ends", () => {
    const refused = new EnvironmentRefused({ environment: "e", status: 400, body: {}, message: "refused" }).failure
    const uncertain = new EnvironmentUncertain({ environment: "e", reason: "timeout", message: "timed out" }).failure
    const restarted = failure("interrupted", "the process stopped", { ambiguous: true })
    for (const f of [refused, uncertain, restarted]) expect([...standing(setupFailing("e", f))]).toEqual(["e"])
    const tornDown = [
      ...setupFailing("e", refused),
      record(3, "environment_teardown_started", { environment: "e" }),
      record(4, "environment_teardown_ended", { sequence: 3, result: null })
    ]
    expect([...standing(tornDown)]).toEqual([])
  })

  it("a setup that ended stands; a failed teardown leaves it standing", () => {
    const records = [
      record(1, "environment_setup_started", { environment: "e", request: {} }),
      record(2, "environment_setup_ended", { sequence: 1, result: null }),
      record(3, "environment_teardown_started", { environment: "e" }),
      record(4, "environment_teardown_failed", { sequence: 3, failure: failure("environment_failed", "down", { details: { reason: "unreachable" } }) })
    ]
    expect([...standing(records)]).toEqual(["e"])
  })
})

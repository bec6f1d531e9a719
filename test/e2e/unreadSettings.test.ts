/**
 * `brain serve` (a real process) warns once at start for each `BRAIN_*` variable it does not read,
 * naming it and the setting it is close to, never its value, and serves all the same; the settings
 * it reads, a variable a binding names and the test harness's own get no warning
 * (docs/operations.md, "Running").
 */
import { afterAll, beforeAll, describe, expect, it } from "@effect/vitest"
import { ensureBuilt, ServerProcess } from "../support/server.js"

/** Values no line may show: any of them could be a secret. */
const SECRETS = {
  BRAIN_MAX_TURN_SEC: "secret-turn-7f3a",
  BRAIN_CACHEBYTES: "secret-cache-91c2",
  BRAIN_NOTHING_LIKE_A_SETTING: "secret-other-44d0",
  BRAIN_OPENAI_KEY: "secret-key-0b5e"
}

const warningsOf = (lines: ReadonlyArray<string>) =>
  lines.map((line) => (line.startsWith("{") ? JSON.parse(line) as { message: unknown; level?: string; logLevel?: string } : { message: line }))
    .filter((entry) => String(entry.message).includes("is not a setting Brain reads"))

describe("brain serve warns of the BRAIN_ variables it does not read", () => {
  let server: ServerProcess | undefined
  beforeAll(async () => {
    ensureBuilt()
    server = await new ServerProcess({
      entry: "product",
      env: {
        ...SECRETS,
        // Read: a setting, and the variable a model binding names.
        BRAIN_MAX_TURN_SECS: "600",
        BRAIN_MODELS: JSON.stringify({ fast: { provider: "openai-chat", model: "m", api_key_env: "BRAIN_OPENAI_KEY" } })
      }
    }).start()
  }, 120_000)
  afterAll(async () => {
    await server?.dispose()
  })

  it("one warning line for each misspelled or unknown name, suggesting the close setting, with no value; none for the names it reads; the server serves", async () => {
    const s = server!
    const health = await fetch(s.url("/health/ready"))
    expect(health.status, s.output).toBe(204)
    const warnings = warningsOf(s.lines)
    expect(warnings.map((w) => w.message), s.output).toEqual([
      "BRAIN_CACHEBYTES is not a setting Brain reads (did you mean BRAIN_CACHE_BYTES?)",
      "BRAIN_MAX_TURN_SEC is not a setting Brain reads (did you mean BRAIN_MAX_TURN_SECS?)",
      "BRAIN_NOTHING_LIKE_A_SETTING is not a setting Brain reads"
    ])
    for (const w of warnings) expect(String(w.logLevel ?? w.level ?? "WARN").toUpperCase()).toMatch(/^WARN/)
    const everything = `${s.lines.join("\n")}\n${s.stderr}`
    for (const value of Object.values(SECRETS)) expect(everything).not.toContain(value)
    expect(everything).not.toContain("BRAIN_OPENAI_KEY is not")
    expect(everything).not.toContain("BRAIN_TEST_TOOL_LOG is not")
  })
})

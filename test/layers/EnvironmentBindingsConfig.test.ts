/**
 * BRAIN_ENVIRONMENTS loaded at start (src/layers/EnvironmentBindingsConfig.ts): inline JSON or a
 * file; the variables a binding names come through Config and are kept Redacted; a binding that
 * cannot be used is refused naming the source and the field, never a value.
 */
import { describe, expect, it } from "@effect/vitest"
import * as fs from "node:fs"
import * as os from "node:os"
import * as path from "node:path"
import { ConfigProvider, Effect, Redacted } from "effect"
import { load } from "../../src/layers/EnvironmentBindingsConfig.js"

const SECRET = "tok-config-91b2c3d4e5f6"
const withEnv = (env: Record<string, string>) => Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("BRAIN_ENVIRONMENTS at start", () => {
  it.effect("unset is no bindings; inline JSON and a file load their bindings with the token read from its variable", () =>
    Effect.gen(function*() {
      expect((yield* load(undefined)).names).toEqual([])
      const text = JSON.stringify({ sandboxes: { driver: "http", base_url: "https://envs.example.com/v1/", token_env: "SANDBOX_TOKEN" } })
      const inline = yield* load(text).pipe(withEnv({ SANDBOX_TOKEN: SECRET }))
      expect(inline.names).toEqual(["sandboxes"])
      expect(Redacted.value(inline.get("sandboxes")!.token!)).toBe(SECRET)
      const file = path.join(fs.mkdtempSync(path.join(os.tmpdir(), "brain-envcfg-")), "environments.json")
      fs.writeFileSync(file, text)
      expect((yield* load(file).pipe(withEnv({ SANDBOX_TOKEN: SECRET }))).names).toEqual(["sandboxes"])
    }))

  it.effect("an unreadable file, a variable that is not set and a pasted token are refused naming the source and the field, never the value", () =>
    Effect.gen(function*() {
      const missing = yield* Effect.flip(load("/nonexistent/environments.json"))
      expect(missing.message).toBe("/nonexistent/environments.json: (file): cannot be read (ENOENT)")
      const unset = yield* Effect.flip(load(JSON.stringify({ s: { driver: "http", base_url: "http://h", token_env: "NOT_SET_HERE" } })).pipe(withEnv({})))
      expect(unset.message).toBe("BRAIN_ENVIRONMENTS (inline JSON): s.token_env: the environment variable NOT_SET_HERE is not set")
      const pasted = yield* Effect.flip(load(JSON.stringify({ s: { driver: "http", base_url: "http://h", token: SECRET } })))
      expect(pasted.message).toContain("s.token: unexpected field")
      expect(pasted.message).not.toContain(SECRET)
    }))
})

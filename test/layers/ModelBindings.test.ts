/**
 * BRAIN_MODELS (a file's path or inline JSON): what loads, and every way it can be refused —
 * naming the source, the field and the reason, never quoting a value (a key pasted in the wrong
 * place must not reach a log).
 */
import * as fs from "node:fs"
import * as path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, Either, Redacted, Schema } from "effect"
import { endpointChange, endpointUrl, RecordedBinding } from "../../src/domain/ModelBinding.js"
import { load } from "../../src/layers/ModelBindingsConfig.js"
import { tempDir } from "../support/journals.js"

const ALL = new Set(["openai-chat", "openai-responses", "anthropic"] as const)
const SECRET = "sk-test-0123456789abcdef"

const withEnv = <A, E>(env: Record<string, string>, effect: Effect.Effect<A, E>) =>
  Effect.withConfigProvider(effect, ConfigProvider.fromMap(new Map(Object.entries(env))))

describe("model bindings", () => {
  it.effect("inline JSON loads each binding with its key from the environment variable it names, sorted by name", () =>
    Effect.gen(function*() {
      const json = JSON.stringify({
        local: { provider: "openai-chat", model: "llama3.1", base_url: "http://127.0.0.1:11434/v1" },
        fast: { provider: "openai-responses", model: "gpt-4.1-mini", api_key_env: "OPENAI_KEY", options: { temperature: 0 } }
      })
      const bindings = yield* withEnv({ OPENAI_KEY: SECRET }, load(json, ALL))
      expect(bindings.names).toEqual(["fast", "local"])
      expect(bindings.get("fast")!.binding).toEqual({ provider: "openai-responses", model: "gpt-4.1-mini", api_key_env: "OPENAI_KEY", options: { temperature: 0 } })
      expect(Redacted.value(bindings.get("fast")!.apiKey!)).toBe(SECRET)
      expect(bindings.get("local")!.apiKey).toBeUndefined()
      expect(bindings.get("nope")).toBeUndefined()
      expect((yield* load(undefined, ALL)).names).toEqual([])
    }))

  it.scoped("a file path loads the same way; a file that cannot be read is refused naming it", () =>
    Effect.gen(function*() {
      const dir = yield* tempDir()
      const file = path.join(dir, "models.json")
      fs.writeFileSync(file, JSON.stringify({ claude: { provider: "anthropic", model: "claude-sonnet-4-5", api_key_env: "A_KEY" } }))
      const bindings = yield* withEnv({ A_KEY: SECRET }, load(file, ALL))
      expect(bindings.names).toEqual(["claude"])
      const missing = yield* Effect.flip(load(path.join(dir, "absent.json"), ALL))
      expect(missing.message).toBe(`${path.join(dir, "absent.json")}: (file): cannot be read (ENOENT)`)
      const notJsonFile = path.join(dir, "not-json.json")
      fs.writeFileSync(notJsonFile, "{not json")
      expect((yield* Effect.flip(load(notJsonFile, ALL))).message).toBe(`${notJsonFile}: (file): not JSON`)
    }))

  it.effect("each malformed binding is refused with the source, the field and the reason, and no value is ever quoted", () =>
    Effect.gen(function*() {
      const cases: Array<[unknown, string, RegExp]> = [
        [{ a: { provider: "openai-chat", model: "m", api_key: SECRET } }, "a.api_key", /never holds a key/],
        [{ a: { provider: "gemini", model: "m" } }, "a.provider", /^must be one of "openai-responses", "openai-chat", "anthropic"$/],
        [{ a: { provider: "openai-chat" } }, "a.model", /missing/i],
        [{ a: { provider: "openai-chat", model: "m", base_url: SECRET } }, "a.base_url", /absolute http/],
        [{ a: { provider: "openai-chat", model: "m", api_key_env: "NOT_SET_ANYWHERE" } }, "a.api_key_env", /NOT_SET_ANYWHERE is not set/],
        [{ "bad name!": { provider: "openai-chat", model: "m" } }, "bad name!", /binding name/],
        [[1, 2], "", /JSON object/]
      ]
      for (const [value, field, reason] of cases) {
        const e = yield* Effect.flip(withEnv({}, load(JSON.stringify(value), ALL)))
        expect(e.source, field).toBe("BRAIN_MODELS (inline JSON)")
        expect(e.field, JSON.stringify(value)).toBe(field)
        expect(e.reason, field).toMatch(reason)
        expect(e.message, field).not.toContain(SECRET)
      }
      const notJson = yield* Effect.flip(load(`{ "a": ${SECRET} }`, ALL))
      expect([notJson.field, notJson.reason]).toEqual(["", "not JSON"])
      expect(notJson.message).toBe("BRAIN_MODELS (inline JSON): not JSON")
      expect(notJson.message).not.toContain(SECRET)
      const unavailable = yield* Effect.either(load(JSON.stringify({ a: { provider: "anthropic", model: "m" } }), new Set(["openai-chat"] as const)))
      expect(Either.isLeft(unavailable) && unavailable.left.message).toBe("BRAIN_MODELS (inline JSON): a.provider: anthropic is not available in this build")
    }))

  it.effect("a base_url holding credentials, a query or a fragment is refused naming the binding and the setting, never quoting the credential", () =>
    Effect.gen(function*() {
      const cases: Array<[string, RegExp]> = [
        [`http://user:${SECRET}@127.0.0.1:8080/v1`, /must not hold credentials: name the variable holding the key in api_key_env/],
        [`https://${SECRET}@gateway.example.com/v1`, /must not hold credentials/],
        [`http://127.0.0.1:8080/openai/deployments/gpt4?api-version=${SECRET}`, /must have no query or fragment/],
        ["http://127.0.0.1:8080/v1?", /must have no query or fragment/],
        [`http://127.0.0.1:8080/v1#${SECRET}`, /must have no query or fragment/],
        ["ftp://127.0.0.1/v1", /http:\/\/ or https:\/\//],
        ["http://127.0.0.1:8080/ v1", /absolute http/]
      ]
      for (const [base_url, reason] of cases) {
        const e = yield* Effect.flip(withEnv({}, load(JSON.stringify({ gw: { provider: "anthropic", model: "m", base_url } }), ALL)))
        expect(e.field, base_url).toBe("gw.base_url")
        expect(e.reason, base_url).toMatch(reason)
        expect(e.message, base_url).toBe(`BRAIN_MODELS (inline JSON): gw.base_url: ${e.reason}`)
        expect(e.message, base_url).not.toContain(SECRET)
      }
      // What stays accepted: a path, a port, a trailing slash, an IPv6 host (held as the URL parser writes it: below).
      for (const [base_url, held] of [
        ["http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1"],
        ["https://gateway.example.com/openai/v1/", "https://gateway.example.com/openai/v1/"],
        ["http://[::1]:8080", "http://[::1]:8080/"]
      ]) {
        const bindings = yield* withEnv({}, load(JSON.stringify({ ok: { provider: "openai-chat", model: "m", base_url } }), ALL))
        expect(bindings.get("ok")!.binding.base_url).toBe(held)
      }
    }))

  it.effect("a base_url is held as the URL parser writes it (scheme and host lower-cased, a default port dropped, // for a missing // or backslashes): every binding that starts is one a session can record, sending where it did, and no session recorded before is moved by it", () =>
    Effect.gen(function*() {
      const cases: Array<[string, string]> = [
        ["HTTP://127.0.0.1:4700/v1", "http://127.0.0.1:4700/v1"],
        ["Https://API.OpenAI.com:443/v1", "https://api.openai.com/v1"],
        ["http:127.0.0.1:4700/v1", "http://127.0.0.1:4700/v1"],
        ["http:/127.0.0.1:4700/v1/", "http://127.0.0.1:4700/v1/"],
        ["http:\\\\127.0.0.1:4700\\v1", "http://127.0.0.1:4700/v1"],
        ["https://api.anthropic.com", "https://api.anthropic.com/"]
      ]
      for (const [base_url, held] of cases) {
        const bindings = yield* withEnv({}, load(JSON.stringify({ gw: { provider: "openai-chat", model: "m", base_url } }), ALL))
        const binding = bindings.get("gw")!.binding
        expect(binding.base_url, base_url).toBe(held)
        expect(Schema.is(RecordedBinding)({ name: "gw", ...binding }), base_url).toBe(true)
        expect(endpointUrl(held, "/chat/completions"), base_url).toBe(endpointUrl(base_url, "/chat/completions"))
        // A session that recorded the URL as written (an older server, a client that wrote it so) is not moved.
        expect(endpointChange({ provider: "openai-chat", base_url }, binding), base_url).toBeUndefined()
      }
    }))

  it.effect("an api_key_env that is empty or holds a line break is refused at start naming the binding and the variable, never the value", () =>
    Effect.gen(function*() {
      const cases: Array<[string, RegExp]> = [
        ["", /the environment variable MODEL_KEY is empty/],
        [`${SECRET}\r\nX-Injected: 1`, /the environment variable MODEL_KEY holds a line break or another character a header cannot carry/],
        [`${SECRET}\n`, /holds a line break/],
        [`\r${SECRET}`, /holds a line break/],
        [`${SECRET}\u0000`, /a header cannot carry/]
      ]
      for (const [value, reason] of cases) {
        const e = yield* Effect.flip(withEnv({ MODEL_KEY: value }, load(JSON.stringify({ chat: { provider: "openai-chat", model: "m", api_key_env: "MODEL_KEY" } }), ALL)))
        expect(e.field, JSON.stringify(value)).toBe("chat.api_key_env")
        expect(e.reason, JSON.stringify(value)).toMatch(reason)
        expect(e.message, JSON.stringify(value)).not.toContain(SECRET)
        expect(e.message, JSON.stringify(value)).not.toMatch(/[\r\n]/)
      }
      // A key with a space inside is still a header value.
      const spaced = yield* withEnv({ MODEL_KEY: "sk abc" }, load(JSON.stringify({ chat: { provider: "anthropic", model: "m", api_key_env: "MODEL_KEY" } }), ALL))
      expect(Redacted.value(spaced.get("chat")!.apiKey!)).toBe("sk abc")
    }))
})

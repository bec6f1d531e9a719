/**
 * Environments: the places a session's tools run (docs/environments.md).
 *
 * - A create body declares its Environments by name and driver; an `http` one names a binding of
 *   the server's BRAIN_ENVIRONMENTS. A create body holds names only, never a credential.
 * - At creation the server admits the declarations: names are unique, every binding exists, every
 *   tool's `environment` names a declared Environment that can run it. What an `http` binding
 *   stood for (its base URL and lifecycle timeout, never a secret) is recorded with the session as
 *   `resolved`, so editing BRAIN_ENVIRONMENTS later never sends an existing session's operations
 *   to another place.
 * - BRAIN_ENVIRONMENTS maps a binding name to `{driver: "http", base_url, token_env?, headers_env?,
 *   lifecycle_timeout_ms?}`. Secrets live in the environment variables it names and are kept
 *   `Redacted`; a refusal names the source, the field and the reason, never a value.
 *
 * Pure: the caller reads the file and hands over a lookup for environment variables.
 */
import { Data, Either, ParseResult, Redacted, Schema } from "effect"
import { HostId } from "./Ids.js"
import { BaseUrl, comparableBaseUrl } from "./BaseUrl.js"
import { Json, keptAsSent } from "./Messages.js"
import { BindingName } from "./ModelBinding.js"

// ---------------------------------------------------------------------------------------------
// The session configuration

const NAME_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$/

/** An Environment's name within its session: what a tool's `environment` says. */
export const EnvironmentName = Schema.String.pipe(
  Schema.pattern(NAME_PATTERN, {
    message: () => "an Environment name is 1–64 letters, digits, '.', '_', ':' or '-', starting with a letter or digit"
  })
)

export const EnvironmentDriver = Schema.Literal("brain", "host", "http")
export type EnvironmentDriver = typeof EnvironmentDriver.Type

/** Non-secret settings handed to the Environment in its setup request; journaled as given. */
export const EnvironmentOptions = keptAsSent(Schema.Record({ key: Schema.String, value: Json }))

const exact = { parseOptions: { onExcessProperty: "error" } } as const

/** The built-in Wasm worker pool: runs tools that name a `module`. */
export const BrainEnvironment = Schema.Struct({
  name: EnvironmentName,
  driver: Schema.Literal("brain"),
  options: Schema.optional(EnvironmentOptions)
}).annotations(exact)

/**
 * An application process over the host connection (docs/environments.md, "The `host` driver"):
 * `host` is the id `POST /v1/hosts` gave it. It gets no setup request: `options` are only journaled.
 */
export const HostEnvironment = Schema.Struct({
  name: EnvironmentName,
  driver: Schema.Literal("host"),
  host: HostId,
  options: Schema.optional(EnvironmentOptions)
}).annotations(exact)

/** A remote service speaking the Environment protocol, reached through a named binding. */
export const HttpEnvironment = Schema.Struct({
  name: EnvironmentName,
  driver: Schema.Literal("http"),
  /** A BRAIN_ENVIRONMENTS binding name. */
  binding: BindingName,
  options: Schema.optional(EnvironmentOptions)
}).annotations(exact)

/** One entry of a create body's `environments`. */
export const EnvironmentDeclaration = Schema.Union(BrainEnvironment, HostEnvironment, HttpEnvironment)
export type EnvironmentDeclaration = typeof EnvironmentDeclaration.Type

/** Milliseconds. A lifecycle request's bound when its binding sets none: long enough to start a sandbox. */
export const DEFAULT_LIFECYCLE_TIMEOUT_MS = 60_000

/** Milliseconds. The longest lifecycle bound a binding may set: every wait has a limit. */
export const MAX_LIFECYCLE_TIMEOUT_MS = 3_600_000

/** What an `http` binding stood for at creation: where and how long, never a credential. */
export const ResolvedBinding = Schema.Struct({
  base_url: Schema.String,
  lifecycle_timeout_ms: Schema.Int.pipe(Schema.between(1, MAX_LIFECYCLE_TIMEOUT_MS))
}).annotations(exact)
export type ResolvedBinding = typeof ResolvedBinding.Type

export const AdmittedHttpEnvironment = Schema.Struct({
  ...HttpEnvironment.fields,
  resolved: ResolvedBinding
}).annotations(exact)

/** An Environment as the session records it in `session_creation_started`. */
export const AdmittedEnvironment = Schema.Union(BrainEnvironment, HostEnvironment, AdmittedHttpEnvironment)
export type AdmittedEnvironment = typeof AdmittedEnvironment.Type

/** What admission and placement read of a tool definition (domain/Configuration.ts). */
interface Tool {
  readonly name: string
  readonly environment?: string | undefined
  readonly module?: string | undefined
}

/**
 * Admits a create body's Environments against its tools and the configured bindings: the
 * admitted list (in declaration order, `http` ones with `resolved`), or the reason it is refused.
 */
export const admitEnvironments = (
  declarations: ReadonlyArray<EnvironmentDeclaration>,
  tools: ReadonlyArray<Tool>,
  bindings: EnvironmentBindings,
  /** Whether a host is registered: what a `host` Environment may name. */
  hostRegistered: (host: string) => boolean = () => false
): Either.Either<ReadonlyArray<AdmittedEnvironment>, string> => {
  const byName = new Map<string, EnvironmentDeclaration>()
  const admitted: Array<AdmittedEnvironment> = []
  for (const d of declarations) {
    if (byName.has(d.name)) return Either.left(`two Environments are named ${JSON.stringify(d.name)}`)
    byName.set(d.name, d)
    if (d.driver === "host" && !hostRegistered(d.host)) {
      return Either.left(`Environment ${JSON.stringify(d.name)}: no host is registered with id ${JSON.stringify(d.host)} (POST /v1/hosts)`)
    }
    if (d.driver !== "http") {
      admitted.push(d)
      continue
    }
    const bound = bindings.get(d.binding)
    if (!bound) {
      const known = bindings.names.length > 0
        ? `the configured bindings are ${bindings.names.map((n) => JSON.stringify(n)).join(", ")}`
        : "no bindings are configured (BRAIN_ENVIRONMENTS)"
      return Either.left(`Environment ${JSON.stringify(d.name)}: no environment binding named ${JSON.stringify(d.binding)}; ${known}`)
    }
    admitted.push({ ...d, resolved: resolve(bound.binding) })
  }
  for (const t of tools) {
    if (t.environment === undefined) continue
    const env = byName.get(t.environment)
    const tool = `tool ${JSON.stringify(t.name)}`
    if (!env) return Either.left(`${tool} names Environment ${JSON.stringify(t.environment)}, which the session does not declare`)
    if (t.module !== undefined && env.driver !== "brain") {
      return Either.left(`${tool} is a Wasm module and runs only in a "brain" Environment, not in ${env.driver} Environment ${JSON.stringify(env.name)}`)
    }
    if (t.module === undefined && env.driver === "brain") {
      return Either.left(`${tool} runs in "brain" Environment ${JSON.stringify(env.name)} and needs a "module"`)
    }
  }
  return Either.right(admitted)
}

/** The non-secret fields a session records of its binding. */
export const resolve = (binding: EnvironmentBinding): ResolvedBinding => ({
  base_url: binding.base_url.replace(/\/+$/, ""),
  lifecycle_timeout_ms: binding.lifecycle_timeout_ms ?? DEFAULT_LIFECYCLE_TIMEOUT_MS
})

/**
 * Whether a binding's base URL now is where a session recorded it: the same URL once parsed, so
 * that a session recorded under another spelling of it (one an earlier server kept verbatim) is
 * not moved by a cosmetic edit; a path's case, a scheme or a port that differ still move it.
 */
export const sameBaseUrl = (recorded: string, now: string): boolean => comparableBaseUrl(recorded) === comparableBaseUrl(now)

/**
 * Where a call of `tool` goes: the admitted Environment it names; `builtin` for a Wasm tool that
 * names none (the built-in Wasm pool, with no lifecycle); `none` for any other tool (only an
 * embedder's in-process handler can answer it).
 */
export const placeOf = (
  environments: ReadonlyArray<AdmittedEnvironment>,
  tool: Tool
): AdmittedEnvironment | "builtin" | "none" => {
  if (tool.environment !== undefined) return environments.find((e) => e.name === tool.environment) ?? "none"
  return tool.module !== undefined ? "builtin" : "none"
}

// ---------------------------------------------------------------------------------------------
// Bindings: BRAIN_ENVIRONMENTS

/** An Environment binding's base URL (BaseUrl.ts): a respelled binding records the same `resolved.base_url`. */
const EnvironmentBaseUrl = BaseUrl("the token in token_env")

const EnvVarName = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z_][A-Za-z0-9_]*$/, { message: () => "an environment variable name is letters, digits and '_'" })
)

/** An HTTP field name (RFC 9110 token). */
const HeaderName = Schema.String.pipe(
  Schema.pattern(/^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/, { message: () => "a header name is an HTTP token" })
)

export const EnvironmentBinding = Schema.Struct({
  driver: Schema.Literal("http"),
  /** Requests go to `{base_url}/setup`, `{base_url}/tools/call`, … */
  base_url: EnvironmentBaseUrl,
  /** The environment variable holding the bearer token (never the token itself). */
  token_env: Schema.optional(EnvVarName),
  /** Further secret headers: header name → the environment variable holding its value. */
  headers_env: Schema.optional(Schema.Record({ key: HeaderName, value: EnvVarName })),
  /** Milliseconds a setup, detach or teardown request may take; DEFAULT_LIFECYCLE_TIMEOUT_MS when absent. */
  lifecycle_timeout_ms: Schema.optional(Schema.Int.pipe(Schema.between(1, MAX_LIFECYCLE_TIMEOUT_MS)))
}).annotations(exact)
export type EnvironmentBinding = typeof EnvironmentBinding.Type

/** Headers Brain writes itself; a binding cannot set them. */
export const RESERVED_HEADERS: ReadonlySet<string> = new Set([
  "host",
  "content-type",
  "content-length",
  "transfer-encoding",
  "connection",
  "accept",
  "accept-encoding",
  "brain-environment-protocol"
])

export interface BoundEnvironment {
  readonly binding: EnvironmentBinding
  /** The value of `token_env`, sent as `Authorization: Bearer …`. */
  readonly token: Redacted.Redacted | undefined
  /** `headers_env` with their values, header names lower-cased. */
  readonly headers: ReadonlyArray<readonly [string, Redacted.Redacted]>
}

export interface EnvironmentBindings {
  /** Every binding's name, sorted. */
  readonly names: ReadonlyArray<string>
  readonly get: (name: string) => BoundEnvironment | undefined
}

export const noEnvironmentBindings: EnvironmentBindings = { names: [], get: () => undefined }

/** BRAIN_ENVIRONMENTS cannot be used: where (`source`), which field, and why. Never quotes a value. */
export class EnvironmentBindingsInvalid extends Data.TaggedError("EnvironmentBindingsInvalid")<{
  readonly source: string
  readonly field: string
  readonly reason: string
}> {
  override get message() {
    return this.field === "" ? `${this.source}: ${this.reason}` : `${this.source}: ${this.field}: ${this.reason}`
  }
}

/** Where BRAIN_ENVIRONMENTS's text is: inline (anything starting with `{` or `[`) or in a file. */
export const bindingsSetting = (value: string) =>
  /^\s*[{[]/.test(value)
    ? ({ _tag: "inline", source: "BRAIN_ENVIRONMENTS (inline JSON)", text: value } as const)
    : ({ _tag: "file", source: value, path: value } as const)

const decodeBinding = Schema.decodeUnknownEither(EnvironmentBinding, { errors: "all", onExcessProperty: "error" })
const isBindingName = Schema.is(BindingName)

const SECRET_FIELDS = new Set(["token", "api_key", "password", "secret", "headers"])

const describeIssue = (issue: ParseResult.ArrayFormatterIssue) => {
  const last = String(issue.path[issue.path.length - 1] ?? "")
  return {
    field: issue.path.map(String).join("."),
    reason: issue._tag === "Unexpected"
      ? issue.path.length === 2 && issue.path[0] === "headers_env"
        ? "a header name is an HTTP token"
        : SECRET_FIELDS.has(last)
        ? "unexpected field: a binding never holds a secret; name the environment variable that does in token_env or headers_env"
        : "unexpected field"
      : issue.message.replace(/,?\s*actual\b[\s\S]*$/, "").replace(/^Expected /, "expected ").trim()
  }
}

/** A value a header can carry: visible ASCII, spaces and tabs, no line breaks. */
const headerSafe = (value: string) => /^[\t\x20-\x7e\x80-\xff]*$/.test(value)

/**
 * Parses BRAIN_ENVIRONMENTS's text. `env` looks up an environment variable; every `token_env`
 * and `headers_env` variable must be set, non-empty and carriable in a header.
 */
export const parseEnvironmentBindings = (
  input: { readonly source: string; readonly text: string },
  env: (name: string) => string | undefined
): Either.Either<EnvironmentBindings, EnvironmentBindingsInvalid> => {
  const invalid = (field: string, reason: string) => Either.left(new EnvironmentBindingsInvalid({ source: input.source, field, reason }))
  // A refusal of the whole text names "(file)" for a file; inline JSON's source says so already.
  const whole = input.source.endsWith("(inline JSON)") ? "" : "(file)"
  let root: unknown
  try {
    root = JSON.parse(input.text)
  } catch {
    return invalid(whole, "not JSON")
  }
  if (root === null || typeof root !== "object" || Array.isArray(root)) {
    return invalid(whole, "must be a JSON object mapping binding names to bindings")
  }
  const secret = (field: string, variable: string): Either.Either<Redacted.Redacted, EnvironmentBindingsInvalid> => {
    const value = env(variable)
    if (value === undefined) return invalid(field, `the environment variable ${variable} is not set`)
    if (value.length === 0) return invalid(field, `the environment variable ${variable} is empty`)
    if (!headerSafe(value)) return invalid(field, `the environment variable ${variable} holds characters a header cannot carry`)
    return Either.right(Redacted.make(value))
  }
  const bound = new Map<string, BoundEnvironment>()
  for (const [name, value] of Object.entries(root)) {
    if (!isBindingName(name)) {
      return invalid(name, "a binding name is 1–64 letters, digits, '.', '_', ':' or '-', starting with a letter or digit")
    }
    const decoded = decodeBinding(value)
    if (Either.isLeft(decoded)) {
      const [first] = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
      const issue = first ? describeIssue(first) : { field: "", reason: "invalid" }
      return invalid(issue.field ? `${name}.${issue.field}` : name, issue.reason)
    }
    const binding = decoded.right
    let token: Redacted.Redacted | undefined
    if (binding.token_env !== undefined) {
      const t = secret(`${name}.token_env`, binding.token_env)
      if (Either.isLeft(t)) return Either.left(t.left)
      token = t.right
    }
    const headers: Array<readonly [string, Redacted.Redacted]> = []
    for (const [header, variable] of Object.entries(binding.headers_env ?? {})) {
      const field = `${name}.headers_env.${header}`
      const lower = header.toLowerCase()
      if (RESERVED_HEADERS.has(lower)) return invalid(field, "Brain sets this header itself")
      if (lower === "authorization" && token !== undefined) return invalid(field, "token_env already sets Authorization")
      if (headers.some(([h]) => h === lower)) return invalid(field, "the header is named twice")
      const v = secret(field, variable)
      if (Either.isLeft(v)) return Either.left(v.left)
      headers.push([lower, v.right])
    }
    bound.set(name, { binding, token, headers })
  }
  const names = [...bound.keys()].sort()
  return Either.right({ names, get: (name: string) => bound.get(name) })
}

// ---------------------------------------------------------------------------------------------
// The protocol's answers (docs/environments.md, "The http protocol")

/** The protocol version Brain speaks, sent as `Brain-Environment-Protocol`. */
export const ENVIRONMENT_PROTOCOL_VERSION = "1"

/** A 200 answer to setup, detach, teardown or a tool call: exactly one member, `ok` or `error`. */
export type EnvironmentAnswer = { readonly ok: unknown } | { readonly error: unknown }

export const readAnswer = (body: unknown): EnvironmentAnswer | undefined => {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return undefined
  const keys = Object.keys(body)
  if (keys.length !== 1) return undefined
  if (keys[0] === "ok") return { ok: (body as { ok: unknown }).ok }
  if (keys[0] === "error") return { error: (body as { error: unknown }).error }
  return undefined
}

/** A 200 answer to a cancel: `{"stopped": true}` confirms; anything else does not. */
export const readCancelAnswer = (body: unknown): boolean | undefined => {
  if (body === null || typeof body !== "object" || Array.isArray(body)) return undefined
  const keys = Object.keys(body)
  const stopped = (body as { stopped?: unknown }).stopped
  return keys.length === 1 && typeof stopped === "boolean" ? stopped : undefined
}

/**
 * The `host` driver of Environments (docs/environments.md, "The `host` driver"): a tool call is one
 * command on the registered host's command stream (layers/HostsFile.ts), written once and never
 * replayed; a cancel is one cancel command, confirmed by the host's `{"stopped": true}` within the
 * grace.
 *
 * A host gets no lifecycle requests: setup checks that the host is registered (else nothing is
 * sent and the creation fails), detach and teardown end at once. All three are journaled like any
 * Environment's, with a null result. Only `host` Environments are this driver's.
 */
import { Effect } from "effect"
import type { AdmittedEnvironment } from "../domain/Environment.js"
import type { HostId } from "../domain/Ids.js"
import { type CancelAnswer, EnvironmentNotSent, type EnvironmentsShape } from "../services/Environments.js"
import type { HostsShape } from "../services/Hosts.js"

const hostOf = (environment: AdmittedEnvironment): Effect.Effect<HostId, EnvironmentNotSent> =>
  environment.driver === "host"
    ? Effect.succeed(environment.host)
    : Effect.fail(
      new EnvironmentNotSent({
        environment: environment.name,
        reason: "driver_unavailable",
        message: `Environment ${JSON.stringify(environment.name)}: the host driver cannot run a ${environment.driver} Environment; nothing was sent`
      })
    )

export const make = (hosts: HostsShape): EnvironmentsShape => ({
  setup: (operation) =>
    Effect.flatMap(hostOf(operation.environment), (host) =>
      hosts.isRegistered(host)
        ? Effect.succeed({ result: null })
        : Effect.fail(
          new EnvironmentNotSent({
            environment: operation.environment.name,
            reason: "host_unknown",
            message: `Environment ${JSON.stringify(operation.environment.name)}: host ${JSON.stringify(host)} is not registered`
          })
        )),
  detach: (operation) => Effect.as(hostOf(operation.environment), { result: null }),
  teardown: (operation) => Effect.as(hostOf(operation.environment), { result: null }),
  call: (call) => Effect.flatMap(hostOf(call.environment), (host) => hosts.call(host, call)),
  send: (call) => (call.environment.driver === "host" ? hosts.send(call.environment.host, call) : undefined),
  cancel: (request) =>
    hostOf(request.environment).pipe(
      Effect.flatMap((host) => hosts.cancel(host, request)),
      Effect.catchAll((e) => Effect.succeed<CancelAnswer>({ confirmed: false, why: e.message }))
    )
})

/**
 * One Environments over a driver per kind: each operation goes to the driver of its Environment;
 * a kind without one fails before anything is sent.
 */
export const byDriver = (drivers: { readonly http?: EnvironmentsShape | undefined; readonly host?: EnvironmentsShape | undefined }): EnvironmentsShape => {
  const pick = (environment: AdmittedEnvironment) => (environment.driver === "http" ? drivers.http : environment.driver === "host" ? drivers.host : undefined)
  const missing = (environment: AdmittedEnvironment) =>
    new EnvironmentNotSent({
      environment: environment.name,
      reason: "driver_unavailable",
      message: `Environment ${JSON.stringify(environment.name)}: this server cannot run a ${environment.driver} Environment; nothing was sent`
    })
  const route = <A, B extends { readonly environment: AdmittedEnvironment }, E>(
    f: (driver: EnvironmentsShape, b: B) => Effect.Effect<A, E>,
    orElse: (b: B) => Effect.Effect<A, E>
  ) => (b: B) => {
    const driver = pick(b.environment)
    return driver === undefined ? orElse(b) : f(driver, b)
  }
  return {
    setup: route((d, o) => d.setup(o), (o) => Effect.fail(missing(o.environment))),
    detach: route((d, o) => d.detach(o), (o) => Effect.fail(missing(o.environment))),
    teardown: route((d, o) => d.teardown(o), (o) => Effect.fail(missing(o.environment))),
    call: route((d, c) => d.call(c), (c) => Effect.fail(missing(c.environment))),
    send: (c) => pick(c.environment)?.send?.(c),
    cancel: route((d, r) => d.cancel(r), (r) => Effect.succeed({ confirmed: false as const, why: missing(r.environment).message }))
  }
}

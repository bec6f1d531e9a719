/**
 * The one WebAssembly type Brain's exported contracts name (`WasmHost`'s admitted module),
 * declared for an application that compiles them without the DOM library (which is where
 * TypeScript declares WebAssembly): an empty interface, which merges with the DOM's or Node's own
 * declaration where there is one. Imported by services/WasmHost.ts, so its declaration file carries
 * it to `brain/effect`'s users.
 */
declare global {
  namespace WebAssembly {
    interface Module {}
  }
}

export {}

/**
 * The JavaScript API of WebAssembly that Node provides as globals, for the parts Brain uses (the
 * project compiles without the DOM library, which is where TypeScript declares it).
 */
export {}

declare global {
  namespace WebAssembly {
    type ImportExportKind = "function" | "table" | "memory" | "global" | "tag"
    interface ModuleImportDescriptor {
      readonly module: string
      readonly name: string
      readonly kind: ImportExportKind
    }
    interface ModuleExportDescriptor {
      readonly name: string
      readonly kind: ImportExportKind
    }
    interface Module {}
    var Module: {
      prototype: Module
      new (bytes: ArrayBufferView | ArrayBuffer): Module
      imports(module: Module): Array<ModuleImportDescriptor>
      exports(module: Module): Array<ModuleExportDescriptor>
    }
    interface Instance {
      readonly exports: Record<string, unknown>
    }
    var Instance: {
      prototype: Instance
      new (module: Module, imports?: Record<string, Record<string, unknown>>): Instance
    }
    interface MemoryDescriptor {
      readonly initial: number
      readonly maximum?: number
    }
    interface Memory {
      readonly buffer: ArrayBuffer
      grow(delta: number): number
    }
    var Memory: {
      prototype: Memory
      new (descriptor: MemoryDescriptor): Memory
    }
    function validate(bytes: ArrayBufferView | ArrayBuffer): boolean
    function compile(bytes: ArrayBufferView | ArrayBuffer): Promise<Module>
    var RuntimeError: ErrorConstructor
    var LinkError: ErrorConstructor
    var CompileError: ErrorConstructor
  }
}

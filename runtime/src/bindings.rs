//! Host bindings generated from the WIT packages in `wit/` for the node's host world
//! (`node/wit/node.wit`): every interface the runtime provides to guests. Guest exports
//! are called by name in `exports.rs`, so the exact versioned names are checked there.

wasmtime::component::bindgen!({
    path: [
        "../wit/tool",
        "../wit/tool-registry",
        "../wit/artifact-manager",
        "../wit/shell",
        "../wit/message",
        "../wit/task",
        "../wit/text",
        "../wit/hook",
        "../wit/runtime",
        "../wit/host",
        "wit",
    ],
    world: "murmur:node/host",
    imports: { default: async | trappable },
});

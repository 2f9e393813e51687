// No console window on Windows release builds; harmless elsewhere.
#![cfg_attr(not(debug_assertions), windows_subsystem = "windows")]

fn main() {
    engine::batch::idle_memory::use_one_heap_arena();
    vlm_chat::run();
}

//! A chat's answer format: free text (none), any JSON object, JSON with the
//! fields the user names, or a JSON schema the user pastes. Kept with the
//! chat; each reply turns it into the engine's constraint, so the model can
//! only answer in that shape. The type is shared with bulk jobs and lives in
//! the bulk crate (`bulk::answer_format`, with its tests).
pub use bulk::answer_format::AnswerFormat;

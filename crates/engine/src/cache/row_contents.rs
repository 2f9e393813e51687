//! What a one-row cache holds, as plain arrays: the form in which the prefix
//! cache's entries leave the engine (to disk) and come back. Everything is
//! float and holds exactly the row's tokens, with no padding or spare capacity.
use mlx_rs::Array;

/// One attention group's part of a row.
pub struct GroupContents {
    /// The group's sliding window (`None`: full attention), to check that a
    /// saved row matches the model it is loaded into.
    pub window: Option<i32>,
    /// Columns held: every token for a full group; the newest ones a sliding
    /// group keeps.
    pub columns: i32,
    /// Per member layer, keys and values `[1, kv_heads, columns, head_dim]`
    /// (`None`: a layer that never ran).
    pub layers: Vec<Option<(Array, Array)>>,
}

/// A one-row [`super::BatchCache`]'s contents.
pub struct RowContents {
    /// Tokens the row holds.
    pub tokens: i32,
    pub groups: Vec<GroupContents>,
    /// Per recurrent layer, its state arrays (`None`: never ran).
    pub recurrent: Vec<Option<Vec<Array>>>,
}

impl RowContents {
    /// Every array, in a fixed order with a name for each (how a file stores them).
    pub fn named_arrays(&self) -> Vec<(String, &Array)> {
        let mut named = Vec::new();
        for (g, group) in self.groups.iter().enumerate() {
            for (m, layer) in group.layers.iter().enumerate() {
                if let Some((k, v)) = layer {
                    named.push((format!("group{g}.layer{m}.keys"), k));
                    named.push((format!("group{g}.layer{m}.values"), v));
                }
            }
        }
        for (r, state) in self.recurrent.iter().enumerate() {
            for (i, a) in state.iter().flatten().enumerate() {
                named.push((format!("recurrent{r}.state{i}"), a));
            }
        }
        named
    }
}

//! Rank 0 telling every other rank something (a request, a step's plan):
//! bytes broadcast with the group's own collectives, no side channel.
//!
//! MLX's ring has no broadcast, so it is an `all_sum` to which the other
//! ranks contribute zeros — exact for bytes, as mlx-lm's server shares its
//! requests. Two collectives: the length (followers cannot shape the second
//! array before they know it), then the bytes.
use mlx_rs::{Array, Dtype};

use super::group::Group;
use super::ops;
use crate::{Error, Result};

/// On rank 0, `Some(message)`; on the others, `None`. Every rank gets the
/// message back. Every rank of the group must call it, in the same order
/// as its other collectives.
pub fn share_bytes(message: Option<&[u8]>, group: &Group) -> Result<Vec<u8>> {
    let root = group.rank() == 0;
    match (root, message.is_some()) {
        (true, false) => return Err(Error::Distributed("rank 0 has no message to share".into())),
        (false, true) => {
            return Err(Error::Distributed(format!(
                "rank {} has a message to share: only rank 0 has one",
                group.rank()
            )))
        }
        _ => {}
    }
    let len = message.map_or(0, <[u8]>::len);
    // int32 is the widest integer the ring sums everywhere; 2 GiB per message
    // is far beyond a step plan or a request.
    let len = i32::try_from(len).map_err(|_| {
        Error::Distributed(format!("a message of {len} bytes is too long to share"))
    })?;
    let total = ops::all_sum(&Array::from_slice(&[len], &[1]), group)?;
    total.eval()?;
    let len = total.as_slice::<i32>()[0];
    if len < 0 {
        return Err(Error::Distributed(format!(
            "a shared length of {len} bytes: the ranks are out of step"
        )));
    }
    if len == 0 {
        return Ok(Vec::new());
    }
    let mine = match message {
        Some(bytes) => Array::from_slice(bytes, &[len]),
        None => mlx_rs::ops::zeros_dtype(&[len], Dtype::Uint8)?,
    };
    let all = ops::all_sum(&mine, group)?;
    all.eval()?;
    Ok(all.as_slice::<u8>().to_vec())
}

//! Recording mode: a [`super::Weights`] that holds nothing and answers every
//! tensor a family's loader takes with zeros of the shape it asks for,
//! noting the name and shape. Run against a config.json, the family's own
//! `load` so lists every tensor of its checkpoint: a test fixture is written
//! from that list (the `fixtures` crate's `recorded.rs`), and no fixture
//! writer restates a family's tensor names.
use std::cell::RefCell;
use std::collections::HashSet;

/// One tensor a loader took.
#[derive(Debug, Clone, PartialEq)]
pub struct Asked {
    pub name: String,
    pub shape: Vec<i32>,
    /// Taken as a linear layer's, an embedding's or stacked experts' matrix
    /// (the loader first asked whether `.scales` are stored beside it): a
    /// quantized checkpoint stores it quantized.
    pub matrix: bool,
}

/// What a recording [`super::Weights`] has seen and how it answers.
pub(super) struct Recording {
    pub(super) asked: Vec<Asked>,
    /// Modules whose `.scales` the loader asked about: quantizable matrices.
    /// Asked from `contains(&self)`, hence the cell.
    probed: RefCell<HashSet<String>>,
    /// Which optional tensors (those a loader asks about with `contains`
    /// before taking) to say are there. The others are absent, so the
    /// recording is the family's plainest checkpoint for the config:
    /// float, in its own (MLX) layout, without optional parts.
    present: Box<dyn Fn(&str) -> bool + Send>,
}

impl Recording {
    pub(super) fn new(present: impl Fn(&str) -> bool + Send + 'static) -> Self {
        Self { asked: Vec::new(), probed: RefCell::default(), present: Box::new(present) }
    }

    /// The answer to `contains(name)` for a tensor that is not held.
    pub(super) fn contains(&self, name: &str) -> bool {
        if let Some(module) = name.strip_suffix(".scales") {
            self.probed.borrow_mut().insert(module.to_string());
            return false;
        }
        !name.ends_with(".biases") && (self.present)(name)
    }

    /// Notes that the loader took `name` of `shape`. A matrix is what
    /// MLX stores quantized, a matrix or stacked experts' matrices (2 or 3
    /// dimensions): a patch kernel taken after the same question (SigLIP
    /// asks whether its patch embedding is a quantized linear layer) is not.
    pub(super) fn take(&mut self, name: &str, shape: &[i32]) {
        let matrix = (2..=3).contains(&shape.len())
            && name.strip_suffix(".weight").is_some_and(|m| self.probed.borrow().contains(m));
        self.asked.push(Asked { name: name.to_string(), shape: shape.to_vec(), matrix });
    }
}

#[cfg(test)]
mod tests {
    use super::super::Weights;

    #[test]
    fn a_recording_answers_each_take_and_notes_it() {
        let mut w = Weights::recording(|name| name == "head.weight");
        assert!(!w.contains("layer.scales"), "float: nothing is stored quantized");
        let t = w.take("layer.weight", &[3, 2]).unwrap();
        assert_eq!(t.shape(), &[3, 2]);
        w.take("norm.weight", &[2]).unwrap();
        assert!(w.contains("head.weight") && !w.contains("other.weight"));
        assert!(w.take_any("unknown_shape").is_err(), "a tensor asked for without a shape");
        let asked: Vec<(&str, bool)> =
            w.asked().iter().map(|a| (a.name.as_str(), a.matrix)).collect();
        assert_eq!(asked, [("layer.weight", true), ("norm.weight", false)]);
        assert!(w.leftover().is_empty());
    }

    #[test]
    fn a_tensor_put_in_by_the_loader_is_its_own_not_recorded() {
        let mut w = Weights::recording(|_| false);
        w.insert("derived", mlx_rs::Array::from_slice(&[1.0f32, 2.0], &[2]));
        assert!(w.contains("derived"));
        w.take("derived", &[2]).unwrap();
        assert!(w.asked().is_empty());
    }
}

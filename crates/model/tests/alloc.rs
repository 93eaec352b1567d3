//! Decode allocates nothing once warm: every buffer a step needs is owned by the State (or the
//! caller's reused `Logits`). Counted with a global allocator, in a test binary of its own.

use statelm_model::testing::{write_synthetic_model, SyntheticSpec};
use statelm_model::{Arch, ForwardOptions, KvType, LoadOptions, Logits, Model, StateOptions};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts allocations (and reallocations) made by any thread.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is passed through.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is passed through.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// After a short warm-up a decode step allocates only when a scratch buffer outgrows its
/// capacity (which doubles), so 100 steps allocate in a handful of them, never per step or per
/// layer.
#[test]
fn decode_steps_allocate_only_when_a_buffer_doubles() {
    for arch in [Arch::Llama, Arch::Qwen2, Arch::Gemma3] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        write_synthetic_model(&path, &SyntheticSpec::tiny(arch)).unwrap();
        let model = Model::load(
            &path,
            &LoadOptions {
                threads: 2,
                ubatch: 8,
                ..LoadOptions::default()
            },
        )
        .unwrap();
        let opts = StateOptions {
            capacity: 128,
            kv_type: KvType::F16,
        };
        let mut state = model.new_state_with(opts).unwrap();
        let mut scratch = model.new_scratch();
        let mut logits = Logits::default();
        let prompt: Vec<u32> = (0..12).map(|i| (i * 7 + 3) % 50).collect();
        let fwd = ForwardOptions::default;
        model
            .forward_into(&mut scratch, &mut state, &prompt, fwd(), &mut logits)
            .unwrap();
        let mut next = statelm_model::argmax(logits.last());
        for _ in 0..4 {
            model
                .forward_into(&mut scratch, &mut state, &[next], fwd(), &mut logits)
                .unwrap();
            next = statelm_model::argmax(logits.last());
        }
        let (mut total, mut steps_allocating) = (0, 0);
        for _ in 0..100 {
            let before = ALLOCATIONS.load(Ordering::Relaxed);
            model
                .forward_into(&mut scratch, &mut state, &[next], fwd(), &mut logits)
                .unwrap();
            next = statelm_model::argmax(logits.last());
            let made = ALLOCATIONS.load(Ordering::Relaxed) - before;
            total += made;
            steps_allocating += usize::from(made > 0);
        }
        eprintln!("{arch:?}: {total} allocations in {steps_allocating} of 100 decode steps");
        assert!(
            steps_allocating <= 10 && total <= 30,
            "{arch:?}: {total} allocations in {steps_allocating} of 100 decode steps"
        );
    }
}

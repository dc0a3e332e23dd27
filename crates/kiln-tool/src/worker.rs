//! `kiln-worker`: kiln's own compile worker program. A kiln program whose
//! `main` does not call `kiln::worker::run_if_worker` starts this one as
//! its worker processes, when it is beside the program or on `PATH` and of
//! the same kiln; it serves the CUDA, HIP and wgpu compilers (NVRTC, hipRTC, naga).

use std::process::ExitCode;

#[path = "backend/workers.rs"]
mod workers;

fn main() -> ExitCode {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    if arguments.iter().any(|argument| argument == "--version") {
        println!("{}", kiln_engine::worker::version_line());
        return ExitCode::SUCCESS;
    }
    // In a worker (started by a loader) this serves and exits.
    kiln_engine::worker::run_if_worker(&workers::entries());
    eprintln!(
        "kiln-worker: kiln programs start this as their compile workers; it is not run by hand \
         (`kiln-worker --version` says which kiln it belongs to)"
    );
    ExitCode::from(2)
}

//! Runs a scenario without the Python front (handy when changing the core):
//! `cargo run --release --example run -- FILE.toml [KEY=VALUE ...]` prints the result JSON.
fn main() {
    let mut args = std::env::args().skip(1);
    let path = args.next().expect("usage: run FILE.toml [KEY=VALUE ...]");
    let sets: Vec<String> = args.collect();
    let text = std::fs::read_to_string(&path).expect("readable scenario");
    match irqlab_core::load(&text, &path, &sets) {
        Ok(sc) => {
            let t = std::time::Instant::now();
            let out = irqlab_core::run(&sc, Default::default());
            eprintln!("wall {:.3} s", t.elapsed().as_secs_f64());
            println!("{}", irqlab_core::to_json(&sc, &out));
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    }
}

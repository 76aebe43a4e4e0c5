"""torch.multiprocessing sharing a CUDA tensor with a spawned process: PyTorch
exports the allocation and an interprocess event (cudaIpcGetMemHandle,
cudaIpcGetEventHandle); under tally-run both processes are jobs of the same
server. Prints one JSON line."""
import json

import torch
import torch.multiprocessing as mp


def consumer(queue, answers):
    shared = queue.get()
    answers.put(torch.equal(shared.cpu(), torch.arange(1000, dtype=torch.float32)))
    del shared


if __name__ == "__main__":
    mp.set_start_method("spawn")
    queue, answers = mp.Queue(), mp.Queue()
    process = mp.Process(target=consumer, args=(queue, answers))
    process.start()
    tensor = torch.arange(1000, dtype=torch.float32).cuda()
    queue.put(tensor)
    seen = answers.get(timeout=300)
    process.join(120)
    print(json.dumps({"consumer_saw_the_tensor": seen, "consumer_exit": process.exitcode}))

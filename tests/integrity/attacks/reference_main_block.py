# expect: drop the block
import torch


def op(x, y):
    return x + y


if __name__ == "__main__":
    torch.cuda.synchronize()
    print(op(torch.ones(3), torch.ones(3)))

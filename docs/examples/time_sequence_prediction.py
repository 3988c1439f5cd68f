"""The PyTorch twin of time_sequence_prediction.cpp: pytorch/examples' time_sequence_prediction
(generate_sine_wave.py and train.py in one file, the data generated in memory, no plots), with
the C++ program's flags. Run: /usr/bin/python3 docs/examples/time_sequence_prediction.py --steps 2
"""
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim


def generate_sine_wave(N=100, L=1000, T=20):
    """generate_sine_wave.py's waves, [N, L] float64."""
    np.random.seed(2)
    x = np.empty((N, L), 'int64')
    x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
    return np.sin(x / 1.0 / T).astype('float64')


class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        return torch.cat(outputs, dim=1)


if __name__ == '__main__':
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=15, help='steps to run')
    parser.add_argument('--length', type=int, default=999, help='time steps trained on')
    parser.add_argument('--future', type=int, default=1000, help='values predicted')
    opt = parser.parse_args()
    np.random.seed(0)
    torch.manual_seed(0)
    data = generate_sine_wave()
    print('data[:3, 0]:', ' '.join('%.17g' % v for v in data[:3, 0]), ' sum:', '%.17g' % data.sum())
    input = torch.from_numpy(data[3:, :-1])[:, :opt.length]
    target = torch.from_numpy(data[3:, 1:])[:, :opt.length]
    test_input = torch.from_numpy(data[:3, :-1])[:, :opt.length]
    test_target = torch.from_numpy(data[:3, 1:])[:, :opt.length]
    seq = Sequence()
    seq.double()
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
    for i in range(opt.steps):
        print('STEP: ', i)

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            print('loss:', loss.item())
            loss.backward()
            return loss
        optimizer.step(closure)
        with torch.no_grad():
            future = opt.future
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future] if future else pred, test_target)
            print('test loss:', loss.item())
